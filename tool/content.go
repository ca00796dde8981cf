package tool

// PartType says what a content Part carries.
type PartType string

const (
	// PartText is a UTF-8 text part; only Text is set.
	PartText PartType = "text"
	// PartMedia is a binary part (an image, audio, a document); MIMEType and Data are set.
	PartMedia PartType = "media"
	// PartResource is an embedded resource (MCP's "resource" content): URI and
	// MIMEType are set, and either Text (a text resource) or Data (a binary one).
	PartResource PartType = "resource"
)

// Part is one piece of model-facing content.
//
// A text part carries Text. A media part carries MIMEType and Data; the registry
// passes media through unchanged, subject only to its per-item size limit. A
// resource part carries URI, MIMEType and either Text or Data (Data nil: a text
// resource); the registry bounds a text resource's text like a text part's and a
// binary resource's bytes like media.
type Part struct {
	Type     PartType `json:"type"`
	Text     string   `json:"text,omitempty"`
	MIMEType string   `json:"mime_type,omitempty"`
	Data     []byte   `json:"data,omitempty"`
	// URI names a resource part's resource (any scheme: file://, https://, a
	// custom one).
	URI string `json:"uri,omitempty"`
}

// Text returns a text part.
func Text(s string) Part { return Part{Type: PartText, Text: s} }

// Media returns a media part with the given MIME type and bytes. The part keeps data;
// the caller must not modify it afterwards.
func Media(mimeType string, data []byte) Part {
	return Part{Type: PartMedia, MIMEType: mimeType, Data: data}
}

// TextResource returns an embedded text resource part.
func TextResource(uri, mimeType, text string) Part {
	return Part{Type: PartResource, URI: uri, MIMEType: mimeType, Text: text}
}

// BlobResource returns an embedded binary resource part. The part keeps data; the
// caller must not modify it afterwards. A nil data is taken as empty bytes.
func BlobResource(uri, mimeType string, data []byte) Part {
	if data == nil {
		data = []byte{}
	}
	return Part{Type: PartResource, URI: uri, MIMEType: mimeType, Data: data}
}

// IsBlob reports whether a resource part carries bytes rather than text.
func (p Part) IsBlob() bool { return p.Type == PartResource && p.Data != nil }
