// Package servepb is the wire protocol of `toolhost serve`: the generated gRPC code
// for serve.proto (regenerate with `make proto`), and the conversions of content
// between the wire and the sdk that the server and the client share (sdk.go).
// Runners in Go use the client package rather than this one; runners in other
// languages generate their own code from serve.proto, which documents every rpc and
// message.
package servepb
