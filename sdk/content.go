package sdk

// PartType says what a content Part carries.
type PartType string

const (
	// PartText is a UTF-8 text part; only Text is set.
	PartText PartType = "text"
	// PartMedia is a binary part (an image, audio, a document); MIMEType and Data are set.
	PartMedia PartType = "media"
)

// Part is one piece of model-facing content.
//
// A text part carries Text. A media part carries MIMEType and Data; the registry
// passes media through unchanged, subject only to its per-item size limit.
type Part struct {
	Type     PartType `json:"type"`
	Text     string   `json:"text,omitempty"`
	MIMEType string   `json:"mime_type,omitempty"`
	Data     []byte   `json:"data,omitempty"`
}

// Text returns a text part.
func Text(s string) Part { return Part{Type: PartText, Text: s} }

// Media returns a media part with the given MIME type and bytes. The part keeps data;
// the caller must not modify it afterwards.
func Media(mimeType string, data []byte) Part {
	return Part{Type: PartMedia, MIMEType: mimeType, Data: data}
}
