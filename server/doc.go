// Package server implements `toolhost serve`: the serve API (internal/servepb,
// documented in serve.proto) through which session runners in any language activate
// Locations, prepare Requests, settle calls with streamed progress, cancel them and
// answer permission asks.
//
// A [Server] owns the Locations it activates (in a child scope of the scope given to
// [New]) and the client handles (OpenClient): Requests, their calls and the asks
// those raise belong to the handle that prepared them, so clients sharing one
// connection are isolated. A handle is found only through the transport connection
// that opened it (the server's transport credentials give each accepted connection
// an identity no client can forge) and ends with it.
// Permission asks are parked by a per-Location [permission.Asker] until a client
// answers through AnswerAsk.
//
// Listening is the caller's choice: [ListenUnix] (mode 0600, private directory, peer
// uid checked) or [ListenTCP] (loopback only, to be used with Options.Token; see
// [NewToken] and [WriteTokenFile]). [Server.Shutdown] interrupts every call, ends
// every stream and deactivates every Location.
//
// # Locks
//
// Server.mu guards the Locations (locs, activating, closing), the calls in flight,
// the pending asks and interactions, their watch sets and pendingSeq; it is never
// held across an activation, a close, a call or a send. A conn's mu guards its
// handles and, for each, its Requests, their calls, closed and cause, and its
// count of watch streams. Server.mu is
// never taken while a conn's mu is held. A SettleStream's sender (progressSender)
// has its own mu for what it keeps to send; a handle counts the events its streams
// hold (atomically) and is closed, without any of these locks held, once they would
// hold more than maxHeldProgress.
package server
