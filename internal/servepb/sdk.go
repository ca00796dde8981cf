package servepb

import "github.com/toolhost/toolhost/sdk"

// Content between the wire and the sdk, for the server and the client alike. The
// wire carries text and media; any other sdk part goes as its text.

// PartOf is part on the wire.
func PartOf(part sdk.Part) *ContentPart {
	if part.Type == sdk.PartMedia {
		return &ContentPart{Part: &ContentPart_Media{Media: &Media{MimeType: part.MIMEType, Data: part.Data}}}
	}
	return &ContentPart{Part: &ContentPart_Text{Text: part.Text}}
}

// SDK is p as an sdk part: media when it carries media, else text.
func (p *ContentPart) SDK() sdk.Part {
	if m := p.GetMedia(); m != nil {
		return sdk.Media(m.MimeType, m.Data)
	}
	return sdk.Text(p.GetText())
}

// SampleMessageOf is m on the wire.
func SampleMessageOf(m sdk.SampleMessage) *SampleMessage {
	return &SampleMessage{Role: m.Role, Content: PartOf(m.Content)}
}

// SDK is p as an sdk sampling message.
func (p *SampleMessage) SDK() sdk.SampleMessage {
	return sdk.SampleMessage{Role: p.GetRole(), Content: p.GetContent().SDK()}
}
