package mcp_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolhost/toolhost/internal/disktest"
	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/internal/oauthtest"
	"github.com/toolhost/toolhost/mcp"
)

// tokenServer is the MCP server URL the grants of these tests are for; only the
// token endpoint is ever contacted.
const tokenServer = "https://mcp.example.test/mcp"

// storeExpired stores in dir a grant for tokenServer freshly minted by as (or
// pointing at tokenURL when as is nil) whose token this side counts as expired,
// and returns it as stored.
func storeExpired(t *testing.T, dir string, as *oauthtest.Server, tokenURL string) *mcp.Grant {
	t.Helper()
	access, refresh := "access-x", "refresh-x"
	if as != nil {
		access, refresh = as.Issue()
		tokenURL = as.URL() + "/token"
	}
	g := &mcp.Grant{
		Server: tokenServer, ClientID: "client-x", TokenURL: tokenURL,
		Token: &oauth2.Token{AccessToken: access, TokenType: "Bearer", RefreshToken: refresh, Expiry: time.Now().Add(-time.Minute)},
	}
	store := mcp.TokenStore{Dir: dir}
	if err := store.Save(tokenServer, g); err != nil {
		t.Fatal(err)
	}
	g, err := store.Load(tokenServer)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// tokenSource is a session's token source over the grant stored in dir for
// tokenServer, with its own HTTP transport (idle connections closed at cleanup).
func tokenSource(t testing.TB, dir string) oauth2.TokenSource {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ts, err := mcp.StoredTokenSource(mcp.Config{Name: "secure", Remote: mcp.Remote{URL: tokenServer, TokenDir: dir}}, &http.Client{Transport: tr})
	if err != nil || ts == nil {
		t.Fatalf("token source: %v, %v", ts, err)
	}
	return ts
}

// TestTokenRefreshOnceAcrossSources: sources that hold one expired grant and
// refresh it at once refresh it once, and all end with the refreshed token, which
// the authorization server (rotating refresh tokens, revoking a reused one's
// family) still honours.
func TestTokenRefreshOnceAcrossSources(t *testing.T) {
	as := oauthtest.New(t)
	as.SetTokenLifetime(time.Hour)
	dir := t.TempDir()
	storeExpired(t, dir, as, "")
	const n = 4
	sources := make([]oauth2.TokenSource, n)
	for i := range sources {
		sources[i] = tokenSource(t, dir) // each holds the expired grant
	}
	start := make(chan struct{})
	tokens := make([]*oauth2.Token, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, ts := range sources {
		wg.Go(func() {
			<-start
			tokens[i], errs[i] = ts.Token()
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("source %d: %v", i, err)
		}
	}
	t.Logf("refreshed %d, rejected %d, reused %d", as.Refreshed(), as.Rejected(), as.Reused())
	if as.Refreshed() != 1 || as.Rejected() != 0 {
		t.Errorf("the token endpoint honoured %d refreshes and refused %d; want 1 and 0", as.Refreshed(), as.Rejected())
	}
	stored, err := mcp.TokenStore{Dir: dir}.Load(tokenServer)
	if err != nil {
		t.Fatal(err)
	}
	if stored.IssuedAt.IsZero() || !as.Valid(stored.Token.AccessToken) {
		t.Errorf("stored grant issued %v, token valid %v; want a live token with its issue time", stored.IssuedAt, as.Valid(stored.Token.AccessToken))
	}
	for i, tok := range tokens {
		if tok != nil && tok.AccessToken != stored.Token.AccessToken {
			t.Errorf("source %d uses another token than the stored one", i)
		}
	}
}

const tokenHelperEnv = "TOOLHOST_TOKEN_HELPER_DIR"

// TestTokenHelperProcess is the other process of TestTokenRefreshAcrossProcesses:
// it loads the grant stored in $TOOLHOST_TOKEN_HELPER_DIR, says "loaded", waits for
// a line on stdin, takes a token and prints it ("token X" or "error E").
func TestTokenHelperProcess(t *testing.T) {
	dir := os.Getenv(tokenHelperEnv)
	if dir == "" {
		t.Skip("the helper process of TestTokenRefreshAcrossProcesses")
	}
	ts := tokenSource(t, dir)
	fmt.Println("loaded")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	tok, err := ts.Token()
	if err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	fmt.Println("token", tok.AccessToken)
}

// TestTokenRefreshAcrossProcesses: two processes that hold one expired grant and
// refresh it at once refresh it once between them, and both end with the same
// live token; neither presents a spent refresh token.
func TestTokenRefreshAcrossProcesses(t *testing.T) {
	as := oauthtest.New(t)
	as.SetTokenLifetime(time.Hour)
	dir := t.TempDir()
	storeExpired(t, dir, as, "")

	type child struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		lines *bufio.Scanner
	}
	children := make([]*child, 2)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTokenHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), tokenHelperEnv+"="+dir)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
		children[i] = c
		t.Cleanup(func() {
			c.in.Close()
			c.cmd.Process.Kill()
			c.cmd.Wait()
		})
	}
	// Each loads the grant before either refreshes.
	next := func(i int) string {
		if !children[i].lines.Scan() {
			t.Fatalf("process %d ended: %v", i, children[i].lines.Err())
		}
		return children[i].lines.Text()
	}
	for i := range children {
		if line := next(i); line != "loaded" {
			t.Fatalf("process %d said %q", i, line)
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.in, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var tokens []string
	for i, c := range children {
		line := next(i)
		tok, ok := strings.CutPrefix(line, "token ")
		if !ok {
			t.Errorf("process %d: %s", i, line)
		}
		tokens = append(tokens, tok)
		c.in.Close()
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
	t.Logf("refreshed %d, rejected %d, reused %d", as.Refreshed(), as.Rejected(), as.Reused())
	if as.Refreshed() != 1 || as.Rejected() != 0 {
		t.Errorf("the token endpoint honoured %d refreshes and refused %d; want 1 and 0", as.Refreshed(), as.Rejected())
	}
	if tokens[0] != tokens[1] || !as.Valid(tokens[0]) {
		t.Errorf("the processes ended with tokens %q; want one live token", tokens)
	}
}

// TestTokenStoreKeepsNewerGrant: a grant issued before the stored one does not
// replace it; a new login (no issue time) does.
func TestTokenStoreKeepsNewerGrant(t *testing.T) {
	store := mcp.TokenStore{Dir: t.TempDir()}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	grant := func(access string, issued time.Time) *mcp.Grant {
		return &mcp.Grant{Server: tokenServer, ClientID: "c", TokenURL: "https://as.example.test/token", IssuedAt: issued,
			Token: &oauth2.Token{AccessToken: access, RefreshToken: "r-" + access}}
	}
	if err := store.Save(tokenServer, grant("newer", at.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	err := store.Save(tokenServer, grant("older", at))
	if !errors.Is(err, mcp.ErrOlderGrant) || !strings.Contains(err.Error(), store.Path(tokenServer)) {
		t.Errorf("saving an older grant: %v; want ErrOlderGrant naming the file", err)
	}
	if g, err := store.Load(tokenServer); err != nil || g.Token.AccessToken != "newer" {
		t.Fatalf("after saving an older grant the store holds %v, %v; want the newer", g, err)
	}
	if err := store.Save(tokenServer, grant("login", time.Time{})); err != nil {
		t.Fatal(err)
	}
	g, err := store.Load(tokenServer)
	if err != nil || g.Token.AccessToken != "login" || !g.IssuedAt.After(at.Add(time.Hour)) {
		t.Fatalf("after a login the store holds %+v, %v; want the login's grant, issued later than the last", g, err)
	}
}

// TestTokenRefreshFailureKeepsGrant: a refresh that fails leaves the stored grant
// as it was and says which server, what failed and what to do.
func TestTokenRefreshFailureKeepsGrant(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		code  string
		want  []string
	}{
		{"Rejected", func(t *testing.T, dir string) {
			as := oauthtest.New(t)
			storeExpired(t, dir, as, "")
			as.ForgetRefreshTokens()
		}, "invalid_grant", []string{"invalid_grant", "log in again"}},
		{"EndpointDown", func(t *testing.T, dir string) {
			storeExpired(t, dir, nil, down.URL+"/token")
		}, "", []string{down.URL + "/token", "tried again at the next use"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			file := mcp.TokenStore{Dir: dir}.Path(tokenServer)
			before, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tokenSource(t, dir).Token()
			var re *mcp.RefreshError
			if !errors.As(err, &re) || re.Code != tc.code {
				t.Fatalf("err = %v; want a *RefreshError with code %q", err, tc.code)
			}
			for _, w := range append(tc.want, tokenServer, "unchanged") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			t.Log(err)
			if strings.Contains(err.Error(), "refresh-") {
				t.Errorf("the error shows a refresh token: %v", err)
			}
			if after, err := os.ReadFile(file); err != nil || !bytes.Equal(after, before) {
				t.Errorf("the token file changed: %v", err)
			}
		})
	}
}

// TestTokenFileUnreadable: an unreadable token file is an error naming it, at
// load and at refresh, and a refresh never writes over it.
func TestTokenFileUnreadable(t *testing.T) {
	for _, tc := range []struct{ name, content string }{
		{"Truncated", `{"token": {"access_tok`},
		{"Empty", `{}`},
		{"NoToken", `{"token_url": "https://as.example.test/token", "token": null}`},
		{"NotAnObject", `[1]`},
	} {
		content := tc.content
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			as := oauthtest.New(t)
			storeExpired(t, dir, as, "")
			store := mcp.TokenStore{Dir: dir}
			file := store.Path(tokenServer)
			ts := tokenSource(t, dir) // holds the grant, expired
			if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Load(tokenServer); err == nil || !strings.Contains(err.Error(), file) {
				t.Errorf("Load: %v; want an error naming %s", err, file)
			}
			if _, err := mcp.StoredTokenSource(mcp.Config{Name: "secure", Remote: mcp.Remote{URL: tokenServer, TokenDir: dir}}, http.DefaultClient); err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "toolhost mcp-login secure") {
				t.Errorf("a new session: %v; want an error naming %s and the login", err, file)
			}
			_, err := ts.Token()
			if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "log in again") {
				t.Errorf("refresh: %v; want an error naming %s", err, file)
			}
			t.Log(err)
			if data, _ := os.ReadFile(file); string(data) != content {
				t.Errorf("the unreadable file was replaced by %q", data)
			}
			if as.Refreshed() != 0 {
				t.Errorf("refreshed %d times over an unreadable file", as.Refreshed())
			}
			// A login replaces it.
			login := &mcp.Grant{Server: tokenServer, ClientID: "c", TokenURL: as.URL() + "/token", Token: &oauth2.Token{AccessToken: "a", RefreshToken: "r"}}
			if err := store.Save(tokenServer, login); err != nil {
				t.Fatalf("a login over the unreadable file: %v", err)
			}
			if g, err := store.Load(tokenServer); err != nil || g.Token.AccessToken != "a" {
				t.Errorf("after a login: %v, %v", g, err)
			}
		})
	}
}

// TestTokenFileWithoutIssueTime: a file written before grants recorded their issue
// time loads, refreshes, and then records it.
func TestTokenFileWithoutIssueTime(t *testing.T) {
	as := oauthtest.New(t)
	dir := t.TempDir()
	access, refresh := as.Issue()
	file := mcp.TokenStore{Dir: dir}.Path(tokenServer)
	old := fmt.Sprintf(`{"server": %q, "client_id": "client-x", "token_url": %q, "token": {"access_token": %q, "token_type": "Bearer", "refresh_token": %q, "expiry": "2020-01-01T00:00:00Z"}}`,
		tokenServer, as.URL()+"/token", access, refresh)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenSource(t, dir).Token()
	if err != nil {
		t.Fatal(err)
	}
	g, err := mcp.TokenStore{Dir: dir}.Load(tokenServer)
	if err != nil || g.Token.AccessToken != tok.AccessToken || g.IssuedAt.IsZero() || as.Refreshed() != 1 {
		t.Fatalf("after the refresh: %+v, %v, refreshed %d", g, err, as.Refreshed())
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v, %v; want mode 0600", fi.Mode(), err)
	}
}

// TestTokenFileOthersCouldReach: a token file others may read, or a link planted
// in its place, is refused at load with an error naming it and what to do, and
// without a token in it; a new login replaces it with a file of mode 0600, and
// what a link pointed to is left as it was.
func TestTokenFileOthersCouldReach(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("modes and links are Unix's")
	}
	login := &mcp.Grant{Server: tokenServer, ClientID: "c", TokenURL: "https://as.example.test/token",
		Token: &oauth2.Token{AccessToken: "access-login", RefreshToken: "refresh-login"}}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, file string)
		says  string
	}{
		{"ReadableByOthers", func(t *testing.T, file string) {
			if err := os.Chmod(file, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "chmod 600"},
		{"LinkToAFileElsewhere", func(t *testing.T, file string) {
			outside := filepath.Join(t.TempDir(), "token.json")
			if err := os.Rename(file, outside); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, file); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			store := mcp.TokenStore{Dir: dir}
			file := store.Path(tokenServer)
			storeExpired(t, dir, nil, "https://as.example.test/token")
			tc.plant(t, file)
			target, _ := filepath.EvalSymlinks(file)
			before, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}

			g, err := store.Load(tokenServer)
			if g != nil || !errors.Is(err, filestore.ErrRefused) {
				t.Fatalf("Load = %v, %v; want the file refused", g, err)
			}
			for _, w := range []string{file, tc.says, "log in again"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), "access-") || strings.Contains(err.Error(), "refresh-") {
				t.Errorf("the error shows a token: %v", err)
			}
			t.Log(err)

			if err := store.Save(tokenServer, login); err != nil {
				t.Fatalf("a new login: %v", err)
			}
			if g, err := store.Load(tokenServer); err != nil || g.Token.AccessToken != "access-login" {
				t.Fatalf("after a new login Load = %v, %v", g, err)
			}
			if fi, err := os.Lstat(file); err != nil || fi.Mode() != 0o600 {
				t.Errorf("after a new login the token file is %v, %v; want a regular file of mode 0600", fi.Mode(), err)
			}
			if target != file {
				if after, err := os.ReadFile(target); err != nil || !bytes.Equal(after, before) {
					t.Errorf("the file the link pointed to changed: %v", err)
				}
			}
		})
	}
}

// TestTokenStoreOnAFullDisk: a login or a refresh that cannot be stored because
// the disk is full says so, naming the file and what to do; the stored grant
// stays whole and readable, no temporary file is left, and the next login once
// space is back is stored.
func TestTokenStoreOnAFullDisk(t *testing.T) {
	disktest.Run(t, 64<<10, func(t *testing.T, d *disktest.Disk) {
		dir := filepath.Join(d.Dir, "oauth")
		store := mcp.TokenStore{Dir: dir}
		grant := func(access string) *mcp.Grant {
			return &mcp.Grant{Server: tokenServer, ClientID: "c", TokenURL: "https://as.example.test/token",
				Scopes: []string{strings.Repeat("s", 16<<10)}, // more than the file's last page takes
				Token:  &oauth2.Token{AccessToken: access, RefreshToken: "refresh-" + access}}
		}
		if err := store.Save(tokenServer, grant("first")); err != nil {
			t.Fatal(err)
		}
		held, err := store.Load(tokenServer)
		if err != nil {
			t.Fatal(err)
		}
		d.Fill(t)
		err = store.Save(tokenServer, grant("second"))
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), store.Path(tokenServer)) || !strings.Contains(err.Error(), "free space") {
			t.Errorf("Save on a full disk = %v; want ENOSPC naming the file and what to do", err)
		}
		next, err := store.Fresh(tokenServer, held, func(*mcp.Grant) (*mcp.Grant, error) { return grant("refreshed"), nil })
		if next == nil || next.Token.AccessToken != "refreshed" || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "could not store") {
			t.Errorf("Fresh on a full disk = %v, %v; want the refreshed grant and the error of storing it", next, err)
		}
		if g, err := store.Load(tokenServer); err != nil || g.Token.AccessToken != "first" {
			t.Fatalf("after the failed writes Load = %v, %v; want the first grant", g, err)
		}
		if got := d.Files(t, dir); len(got) != 2 { // the grant and its lock
			t.Errorf("the token directory holds %v", got)
		}
		d.Free(t)
		if err := store.Save(tokenServer, grant("third")); err != nil {
			t.Fatalf("Save once space is back: %v", err)
		}
		if g, err := store.Load(tokenServer); err != nil || g.Token.AccessToken != "third" {
			t.Errorf("Load = %v, %v; want the third grant", g, err)
		}
	})
}
