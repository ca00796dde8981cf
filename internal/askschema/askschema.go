// Package askschema carries the validator of tool.Ask's answers from the host side to
// the sdk without linking a JSON Schema validator into every plugin binary: a plugin
// never needs one, because its questions are put, and their answers validated, by its
// host, and the validator would add to every plugin's size and start.
//
// The registry package, which every host links, sets Compile in its init.
package askschema

import "encoding/json"

// Compile, when set, compiles a question's schema (a JSON object schema) and returns
// the check of an accepted answer's content against it. Set once, in a package
// initializer; read-only afterwards.
var Compile func(schema json.RawMessage) (validate func(content json.RawMessage) error, err error)
