// Package apicheck holds tests of the module's public API as a whole: what an
// embedder links, and that exported identifiers show no internal types. It has no
// code of its own.
package apicheck
