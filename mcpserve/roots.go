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
// directories among them to Options.Roots. A session has one roots/list in flight
// at a time: a list change meanwhile asks once more after it, however many came,
// so a client's run of notifications/roots/list_changed costs no goroutine or
// request of the host's each.
func (s *Server) syncRoots(ss *gomcp.ServerSession) {
	if s.opts.Roots == nil || ss == nil {
		return
	}
	s.mu.Lock()
	if _, running := s.rootsAgain[ss]; running {
		s.rootsAgain[ss] = true
		s.mu.Unlock()
		return
	}
	s.rootsAgain[ss] = false
	s.mu.Unlock()
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		for {
			s.listRoots(ss)
			s.mu.Lock()
			if !s.rootsAgain[ss] {
				delete(s.rootsAgain, ss)
				s.mu.Unlock()
				return
			}
			s.rootsAgain[ss] = false
			s.mu.Unlock()
		}
	}()
}

// listRoots asks the session's client for its roots once and passes them on.
func (s *Server) listRoots(ss *gomcp.ServerSession) {
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
