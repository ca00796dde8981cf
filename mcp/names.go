package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/toolhost/toolhost/registry"
)

// maxNameLen is the registry's name length limit.
const maxNameLen = 64

// ToolName returns the registered name of a server's tool: "<server>_<tool>" with
// every character outside [A-Za-z0-9_-] replaced by "_" (as registry.NormalizeName
// does). A result over 64 characters is shortened to its first 55 characters, "_" and
// the first 8 hex digits of the SHA-256 of the unnormalized "<server>_<tool>", so the
// name is stable across restarts and distinct tools stay distinct. The server is
// always called with the tool's original name.
func ToolName(server, tool string) (string, error) {
	full := server + "_" + tool
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, full)
	if len(name) > maxNameLen {
		sum := sha256.Sum256([]byte(full))
		name = name[:maxNameLen-9] + "_" + hex.EncodeToString(sum[:4])
	}
	return registry.NormalizeName(name)
}
