// Package stderrtail quotes the end of a program's standard error in errors about
// the program, since it usually says why the program failed.
package stderrtail

import "strings"

// maxTailLines is how many of a program's last stderr lines an error quotes.
const maxTailLines = 20

// Quote returns msg followed, when stderr has text, by its last lines indented
// under a heading that says whose they are (who: "plugin", "server"). Errors about a
// program that failed quote its stderr this way, since it usually says why.
func Quote(msg, who, stderr string) string {
	tail := strings.TrimSpace(stderr)
	if tail == "" {
		return msg
	}
	lines := strings.Split(tail, "\n")
	if len(lines) > maxTailLines {
		lines = lines[len(lines)-maxTailLines:]
	}
	return msg + "\n" + who + " stderr (last lines):\n  " + strings.Join(lines, "\n  ")
}
