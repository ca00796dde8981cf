// Package builtin provides the built-in tools every Location registers: read, list,
// glob and grep.
//
// They are ordinary tools made with the sdk, like any plugin's. Each captures the
// Location's FileSystem ([fsys.FS]) and Permission ([permission.Service]) services
// when it is built and formulates its own permission request before it touches a
// file: the action is the tool's name, the resources are the root-relative resolved
// paths (or glob pattern), the save patterns cover the directory involved, and the
// source carries the Invocation's ids. Paths that leave the root, or name nothing,
// are model-visible tool failures; a permission error is returned as Assert gave it.
//
// Package builtin imports sdk, fsys and permission of toolhost.
package builtin
