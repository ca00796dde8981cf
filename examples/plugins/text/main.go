// Command text is an example toolhost plugin with typed text tools. Copy it to start
// your own: each tool is an ordinary Go function wrapped by sdk.NewTool, which derives
// the tool's JSON Schemas from its input and output types.
//
// It shows the three ways a result reaches the model:
//   - upper returns a string, which becomes one text part;
//   - word_count returns a struct and a Projection that summarises it in one line;
//   - find returns a struct with no projection: the model gets the structured output.
//
// It also shows a model-visible failure (find with an invalid regular expression),
// activation options read from the Location config, and a tool that asks the
// runner's model (sdk.Sample) and the person (sdk.Ask): title.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/toolhost/toolhost/sdk"
)

// Options are this plugin's "options" in the Location config, for example
//
//	{ "name": "text", "source": "../plugins/text", "options": { "max_matches": 50 } }
type Options struct {
	// MaxMatches caps how many matches find returns; default 100.
	MaxMatches int `json:"max_matches"`
}

// TextInput is the input of upper and word_count. Field names come from the json
// tags; a field without omitempty is required; the jsonschema tag describes the field
// to the model (escape a comma in it as \,).
type TextInput struct {
	Text string `json:"text" jsonschema:"description=The text to work on."`
}

// Counts is word_count's output.
type Counts struct {
	Lines int `json:"lines" jsonschema:"description=Number of lines; a last line without a newline counts."`
	Words int `json:"words" jsonschema:"description=Number of whitespace-separated words."`
	Bytes int `json:"bytes" jsonschema:"description=Length in bytes of the UTF-8 text."`
}

// FindInput is find's input.
type FindInput struct {
	Text    string `json:"text" jsonschema:"description=The text to search."`
	Pattern string `json:"pattern" jsonschema:"description=A regular expression in Go (RE2) syntax matched against each line."`
}

// Match is one matching line.
type Match struct {
	Line int    `json:"line" jsonschema:"description=1-based line number."`
	Text string `json:"text" jsonschema:"description=The whole line."`
}

// FindOutput is find's output.
type FindOutput struct {
	Matches []Match `json:"matches"`
	// Truncated is set when more lines matched than max_matches allows.
	Truncated bool `json:"truncated"`
}

// Activate is called once per Location activation. It reads the options and
// registers the tools; the tools capture what they need (here, the options) in
// closures, so nothing is looked up during a call.
func Activate(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
	opts := Options{MaxMatches: 100}
	if loc.Options != nil {
		if err := json.Unmarshal(loc.Options, &opts); err != nil {
			return fmt.Errorf("text: options: %w", err) // the Location reports a failed start
		}
	}
	if opts.MaxMatches < 1 {
		return fmt.Errorf("text: options: max_matches must be at least 1, got %d", opts.MaxMatches)
	}

	// The map keys are the tools' names. Register is atomic: if one tool is bad,
	// none is registered and the error names it.
	_, err := tools.Register(ctx, map[string]sdk.Tool{
		"upper":      upper(),
		"word_count": wordCount(),
		"find":       find(opts.MaxMatches),
		"title":      title(),
	})
	return err
}

func upper() sdk.Tool {
	return sdk.NewTool("Converts text to upper case.",
		func(ctx context.Context, inv sdk.Invocation, in TextInput) (string, error) {
			return strings.ToUpper(in.Text), nil
		})
}

func wordCount() sdk.Tool {
	tool := sdk.NewTool("Counts the lines, words and bytes of a text, like wc.",
		func(ctx context.Context, inv sdk.Invocation, in TextInput) (Counts, error) {
			c := Counts{Words: len(strings.Fields(in.Text)), Bytes: len(in.Text)}
			c.Lines = strings.Count(in.Text, "\n")
			if in.Text != "" && !strings.HasSuffix(in.Text, "\n") {
				c.Lines++
			}
			return c, nil
		})
	// A projection turns the output into what the model reads. It must be pure: it
	// sees only the validated input and the output, and does no I/O.
	tool.Project = sdk.ProjectTyped(func(in TextInput, out Counts) []sdk.Part {
		return []sdk.Part{sdk.Text(fmt.Sprintf("%d lines, %d words, %d bytes", out.Lines, out.Words, out.Bytes))}
	})
	return tool
}

func find(maxMatches int) sdk.Tool {
	return sdk.NewTool("Finds the lines of a text that match a regular expression and returns them with their line numbers.",
		func(ctx context.Context, inv sdk.Invocation, in FindInput) (FindOutput, error) {
			re, err := regexp.Compile(in.Pattern)
			if err != nil {
				// A mistake the model can fix: return a *sdk.ToolFailure, whose message
				// the model sees. Any other error would be an operational failure.
				return FindOutput{}, sdk.Failf("pattern %q is not a valid regular expression: %w", in.Pattern, err)
			}
			// Not nil: the output schema says "matches" is an array, and a nil slice
			// encodes as null, which the host would refuse as invalid output.
			out := FindOutput{Matches: []Match{}}
			lines := strings.Split(strings.TrimSuffix(in.Text, "\n"), "\n")
			for i, line := range lines {
				if !re.MatchString(line) {
					continue
				}
				if len(out.Matches) == maxMatches {
					out.Truncated = true
					break
				}
				out.Matches = append(out.Matches, Match{Line: i + 1, Text: line})
			}
			return out, nil
		})
}

// TitleAnswer is the person's answer to title's question.
type TitleAnswer struct {
	Title string `json:"title"`
}

// titleSchema is the form of title's question: a TitleAnswer with a title.
var titleSchema, _ = json.Marshal(map[string]any{
	"type":       "object",
	"properties": map[string]any{"title": map[string]any{"type": "string", "minLength": 1, "description": "The title"}},
	"required":   []string{"title"},
})

// title asks the runner's model to propose a title, then asks the person to keep or
// change it. Nobody to answer is not a failure: the plugin needs "grants": ["ask",
// "sample"] in the Location config, and a runner may have no model or person at
// hand, so title falls back to the first line and to the model's proposal.
func title() sdk.Tool {
	return sdk.NewTool("Proposes a title for a text, asking the model for one and the person to confirm it.",
		func(ctx context.Context, inv sdk.Invocation, in TextInput) (string, error) {
			proposal, _, _ := strings.Cut(strings.TrimSpace(in.Text), "\n")
			res, err := sdk.Sample(ctx, sdk.SampleRequest{
				SystemPrompt: "You write short titles. Answer with the title alone.",
				Messages:     []sdk.SampleMessage{{Role: "user", Content: sdk.Text("A title for:\n" + in.Text)}},
				MaxTokens:    30,
			})
			switch {
			case err == nil:
				proposal = strings.TrimSpace(res.Message.Content.Text)
			case errors.Is(err, sdk.ErrUnanswered):
			case ctx.Err() != nil:
				return "", context.Cause(ctx)
			default:
				return "", sdk.Failf("the model could not propose a title: %w", err)
			}
			a, err := sdk.Ask(ctx, sdk.Question{Message: fmt.Sprintf("Title this text %q?", proposal), Schema: titleSchema})
			switch {
			case errors.Is(err, sdk.ErrUnanswered):
				return proposal, nil
			case err != nil:
				return "", err
			case a.Action != sdk.Accepted:
				return "", sdk.Failf("the person did not want a title (%s)", a.Action)
			}
			var ans TitleAnswer
			if err := json.Unmarshal(a.Content, &ans); err != nil {
				return "", err
			}
			return ans.Title, nil
		})
}

// main is the whole program: sdk.Serve talks to the host until it ends the plugin.
func main() { sdk.Serve(sdk.ActivateFunc(Activate)) }
