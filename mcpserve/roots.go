package mcpserve

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// rootsTimeout bounds one roots/list.
const rootsTimeout = 30 * time.Second

// syncRoots asks the session's client for its roots, in the background (a handler
// must not wait on a request to its own client), and passes the file://
// directories among them to Options.Roots.
func (s *Server) syncRoots(ss *gomcp.ServerSession) {
	if s.opts.Roots == nil || ss == nil {
		return
	}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		ctx, cancel := context.WithTimeout(s.ctx, rootsTimeout)
		defer cancel()
		res, err := ss.ListRoots(ctx, &gomcp.ListRootsParams{})
		if err != nil {
			s.log.Warn("roots/list failed: no Location from this client's roots", "error", err)
			return
		}
		s.rootsMu.Lock()
		defer s.rootsMu.Unlock()
		s.opts.Roots(rootDirs(res.Roots))
	}()
}

// rootDirs returns the existing directories named by file:// roots, sorted and
// without duplicates.
func rootDirs(roots []*gomcp.Root) []string {
	var dirs []string
	for _, r := range roots {
		u, err := url.Parse(r.URI)
		if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") {
			continue
		}
		dir := filepath.Clean(u.Path)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || !filepath.IsAbs(dir) {
			continue
		}
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}
