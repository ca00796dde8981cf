// Package fsys is a Location's FileSystem service: resolving, reading, listing,
// globbing and grepping files, everything confined to the Location's root directory.
//
// Every path is resolved by [FS.Resolve] before it is used: `..` cannot climb out
// of the root, absolute paths must lie inside it, and symlinks are followed one
// component at a time, so one whose target leaves the root (directly, through a
// chain, or dangling) is refused. Walks (Glob, Grep) never follow symlinks.
//
// Resolve works on path names, to explain a refusal and to name what a permission
// covers; it does not open anything. Every open then goes through the root's
// descriptor ([os.Root]): each component is opened relative to the directory before it, starting at the root (the kernel never resolves a path name outside it), and
// a symlink is followed only while it stays inside. So a process that can write
// inside the root and swaps a checked file or directory for a symlink leading out,
// between Resolve and the open, gets a refusal (ErrOutsideRoot or fs.ErrNotExist),
// never the outside file; a walk skips a directory swapped that way. The one thing
// the race can still change is which file inside the root is read.
//
// Package fsys imports nothing else of toolhost.
package fsys
