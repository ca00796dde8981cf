// Package askschema carries the validator of tool.Ask's answers from the host side to
// the sdk without linking a JSON Schema validator into every plugin binary: the
// validator's package initializer compiles its metaschemas, about 3.5 ms of every
// plugin start (measured on the project's VM, see BENCHMARKS.md), and a plugin never
// needs it, because its questions are put, and their answers validated, by its host.
//
// The registry package, which every host links, sets Compile in its init.
package askschema

import "encoding/json"

// Compile, when set, compiles a question's schema (a JSON object schema) and returns
// the check of an accepted answer's content against it. Set once, in a package
// initializer; read-only afterwards.
var Compile func(schema json.RawMessage) (validate func(content json.RawMessage) error, err error)
