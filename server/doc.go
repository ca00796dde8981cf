// Package server implements `toolhost serve`: the serve API (internal/servepb,
// documented in serve.proto) through which session runners in any language activate
// Locations, prepare Requests, settle calls with streamed progress, cancel them and
// answer permission asks.
//
// A [Server] owns the Locations it activates (in a child scope of the scope given to
// [New]) and the per-connection state: Requests and their calls belong to the
// transport connection that prepared them, identified by the server itself (its
// transport credentials give each accepted connection an identity), so no client can
// name another's.
// Permission asks are parked by a per-Location [permission.Asker] until a client
// answers through AnswerAsk.
//
// Listening is the caller's choice: [ListenUnix] (mode 0600, private directory, peer
// uid checked) or [ListenTCP] (loopback only, to be used with Options.Token; see
// [NewToken] and [WriteTokenFile]). [Server.Shutdown] interrupts every call, ends
// every stream and deactivates every Location.
//
// Package server/provider checks and adapts definitions for model providers.
package server
