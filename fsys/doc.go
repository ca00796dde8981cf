// Package fsys is a Location's FileSystem service: resolving, reading, listing,
// globbing and grepping files, everything confined to the Location's root directory.
//
// Every path is resolved by [FS.Resolve] before it is used: `..` cannot climb out
// of the root, absolute paths must lie inside it, and symlinks are followed one
// component at a time, so one whose target leaves the root (directly, through a
// chain, or dangling) is refused. Walks (Glob, Grep) never follow symlinks.
//
// Resolution uses path names, not file descriptors (no openat), so it is subject to
// a time-of-check/time-of-use race: a process that can write inside the root can
// swap a checked directory for a symlink between Resolve and the open. It protects
// against paths a model or a plugin supplies, not against a concurrent local
// attacker.
//
// Package fsys imports nothing else of toolhost.
package fsys
