// Package location owns Locations: workspaces given by a canonical directory and their
// config, .toolhost/config.json (see [LoadConfig] and the published [ConfigSchema]).
//
// [Activate] turns a directory into a running Location: a fresh Location scope, a
// registry placement, the Location's services (a FileSystem confined to the directory
// and a Permission service with the config's rules), the built-in tools, and every
// configured source started in parallel in its own child scope: plugins (given as Go
// source they are built first, see [BuildPlugin]; given as a Go module, the version
// locked in .toolhost/plugins.lock.json is fetched, checked and built, see
// [LockModules] and [BuildModule]) and MCP servers, each supervised and restarted
// under a crash budget, and manifest tools. A Location degrades rather than fails: a
// source that cannot start is reported ([Location.Sources], with state, error and
// stderr tail, and [Location.SourcesChanged]) and retried while the others serve,
// and can be restarted by name ([Location.RestartSource]); while a plugin or MCP
// server restarts its tools stay advertised and calls wait for its successor
// (registry.Hold). Only a config error refuses the Location, leaving nothing behind.
// [Location.Close] deactivates: every tool of the Location
// disappears, in-flight executions end as interruptions, and every process it started
// is gone.
//
// Among the sources of one Location (the built-ins, each plugin, each MCP server, each
// manifest tool) a tool name belongs to the source holding it; the config's
// "overrides" let a source take named ones over (see registry.Registry.Register).
// Every call to an untrusted source is checked by permission with the source named
// ("plugin:NAME", "mcp:NAME", "manifest:NAME"; the built-ins ask as "builtin"), so
// rules and saved approvals can be scoped to one source.
//
// # Locks
//
// A Location's fields are set by Activate and not changed after it returns, but for
// these: each source's mu guards its supervisor, state, error and stderr tail (and
// its op serializes RestartSource, taken before mu, never while holding it);
// changedMu guards changedCh. No Location lock is held while calling into the
// registry, a supervisor or permission, which have their own (see their docs). The
// registry placement, opened by Activate and released last by Close, is the one
// shared with other Locations; an id is open at most once in a registry, and
// toolhost serve waits for a closing Location before opening it again. Files two
// processes may write — plugins.lock.json, the build cache, saved approvals — are
// changed under a file lock (internal/filestore, UpdateLock, BuildPlugin,
// BuildModule, the scratch modules). The one state Locations of a process share is
// the config watcher (configWatches): its mu guards the watched directories'
// counts and the watches, and each watch's filter runs under it, so a filter takes
// no lock at all.
package location
