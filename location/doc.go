// Package location owns Locations: workspaces given by a canonical directory and their
// config, .toolhost/config.json (see [LoadConfig] and the published [ConfigSchema]).
//
// [Activate] turns a directory into a running Location: a fresh Location scope, a
// registry placement, and every configured plugin started in parallel and supervised in
// its own child scope (plugins given as Go source are built first, see [BuildPlugin]).
// A failed activation leaves nothing behind. [Location.Close] deactivates: every tool
// of the Location disappears, in-flight executions end as interruptions, and every
// process it started is gone.
//
// MCP servers and manifest tools are parsed and validated but not served yet;
// activation logs a warning when a config declares them.
package location
