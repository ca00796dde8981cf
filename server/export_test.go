package server

// MaxHeldProgressPerHandle is maxHeldProgress, for tests.
const MaxHeldProgressPerHandle = maxHeldProgress

// MaxHeldProgress returns the most progress events one client handle's streams
// held at once on s.
func MaxHeldProgress(s *Server) int64 { return s.maxHeld.Load() }

// MaxWatchesPerConn is maxWatches, for tests.
const MaxWatchesPerConn = maxWatches
