package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolhost/toolhost/internal/filestore"
)

// TokenStore keeps one OAuth grant per remote server URL, each in its own file
// (mode 0600, in a directory of mode 0700), shared by every toolhost process of
// the user. Each change happens under the file's lock (internal/filestore) and is
// written atomically. A stored grant never goes back to an older one (see Save),
// and a refresh happens under the lock, so processes holding one grant refresh it
// once between them (see Fresh). Tokens never appear in logs or errors.
type TokenStore struct{ Dir string }

// Grant is what a login leaves for later sessions: the client (as registered),
// the token endpoint and the token.
type Grant struct {
	Server       string   `json:"server"`
	Issuer       string   `json:"issuer,omitempty"`
	ClientID     string   `json:"client_id"`
	ClientSecret string   `json:"client_secret,omitempty"`
	AuthStyle    int      `json:"auth_style,omitempty"`
	AuthURL      string   `json:"auth_url,omitempty"`
	TokenURL     string   `json:"token_url"`
	Scopes       []string `json:"scopes,omitempty"`
	// IssuedAt is when the store took the token (at login or refresh); of two
	// grants for one server the later IssuedAt is the newer (see Save and Fresh).
	// Zero in files written before it was recorded.
	IssuedAt time.Time     `json:"issued_at,omitzero"`
	Token    *oauth2.Token `json:"token"`
}

// ErrOlderGrant is returned (wrapped) by Save for a grant issued before the one
// stored, which it keeps.
var ErrOlderGrant = errors.New("mcp: the stored OAuth grant is newer")

// RefreshError reports a refresh of a stored grant that failed; the stored grant
// is as it was. It names the server and the token endpoint, never a token.
type RefreshError struct {
	Server   string // the MCP server's URL
	TokenURL string
	// Code is the OAuth error code the token endpoint answered ("invalid_grant":
	// the refresh token expired, was revoked or was used already), "" when it
	// could not be reached or answered no OAuth error.
	Code string
	Err  error
}

func (e *RefreshError) Error() string {
	what := fmt.Sprintf("mcp: refresh the OAuth token for %s at %s", RedactURL(e.Server), RedactURL(e.TokenURL))
	var re *oauth2.RetrieveError
	switch {
	case e.Code == "invalid_grant":
		return what + ": the authorization server refused the stored refresh token (invalid_grant: it expired, was revoked or was used already); the stored grant is unchanged but no longer usable: log in again"
	case e.Code != "" && errors.As(e.Err, &re):
		msg := fmt.Sprintf("%s: the authorization server answered %s", what, e.Code)
		if re.ErrorDescription != "" {
			msg += " (" + re.ErrorDescription + ")"
		}
		return msg + "; the stored grant is unchanged: log in again if this persists"
	case errors.Is(e.Err, errNoRefreshToken):
		return fmt.Sprintf("%s: %v; log in again", what, e.Err)
	case errors.As(e.Err, &re):
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		return fmt.Sprintf("%s: the token endpoint answered HTTP %d without an OAuth error; the stored grant is unchanged and the refresh is tried again at the next use", what, status)
	default:
		return fmt.Sprintf("%s: %v; the stored grant is unchanged and the refresh is tried again at the next use", what, e.Err)
	}
}

func (e *RefreshError) Unwrap() error { return e.Err }

// grantPolicy is what a token file may be: a regular file of at most 1 MiB that no
// one else may read or write, in a directory no one else may write.
var grantPolicy = filestore.Policy{Private: true, Secret: true, MaxBytes: 1 << 20}

// Path returns the file that holds the grant for serverURL.
func (s TokenStore) Path(serverURL string) string {
	sum := sha256.Sum256([]byte(serverURL))
	return filepath.Join(s.Dir, hex.EncodeToString(sum[:16])+".json")
}

// Load returns the grant stored for serverURL, or nil when there is none. A file
// that cannot be read or parsed is an error naming it, and so is one that others
// may read or write, a link, or one in a directory others may write (a
// *filestore.FileError): it is not used.
func (s TokenStore) Load(serverURL string) (*Grant, error) {
	file := s.Path(serverURL)
	data, err := grantPolicy.ReadFile(file)
	if errors.Is(err, filestore.ErrRefused) {
		return nil, fmt.Errorf("mcp: the OAuth token file of %s: %w (or log in again to replace it)", RedactURL(serverURL), err)
	}
	if err != nil {
		return nil, fmt.Errorf("mcp: read the OAuth token file for %s: %w", RedactURL(serverURL), err)
	}
	if data == nil {
		return nil, nil
	}
	return decodeGrant(serverURL, file, data)
}

// decodeGrant parses the contents of file, the token file of serverURL.
func decodeGrant(serverURL, file string, data []byte) (*Grant, error) {
	var g Grant
	var why string
	var se *json.SyntaxError
	switch err := json.Unmarshal(data, &g); {
	case errors.As(err, &se):
		why = fmt.Sprintf("it is not valid JSON (at byte %d)", se.Offset) // the message could quote a token's byte
	case err != nil:
		why = "it does not hold a grant"
	case g.Token == nil || g.TokenURL == "":
		why = "it has no token or no token endpoint"
	}
	if why != "" {
		return nil, fmt.Errorf("mcp: the OAuth token file of %s, %s, is unreadable: %s; log in again to replace it", RedactURL(serverURL), file, why)
	}
	return &g, nil
}

// Save stores g for serverURL, under the file's lock and atomically and durably
// (a temporary file in the same directory, synced, renamed over the old one, the
// directory synced), with mode 0600. A grant without IssuedAt (a new login) is
// stored as issued now, later than the stored one. A grant with IssuedAt earlier
// than the stored one's is not stored: Save keeps the newer and returns an error
// wrapping ErrOlderGrant. A stored file that is unreadable, or that Load refuses
// (a link, a mode that lets others read it), is replaced (logging in again is the
// remedy its error names); a directory others may write is refused. Save does not
// change g.
func (s TokenStore) Save(serverURL string, g *Grant) (err error) {
	file := s.Path(serverURL)
	defer func() {
		if err != nil {
			err = fmt.Errorf("mcp: store the OAuth token for %s: %w", RedactURL(serverURL), err)
		}
	}()
	l, err := grantPolicy.Lock(file)
	if err != nil {
		return err
	}
	defer l.Unlock()
	old, err := l.Read()
	if err != nil && !errors.Is(err, filestore.ErrRefused) { // a refused file is replaced
		return fmt.Errorf("read %s: %w", file, err)
	}
	next := *g
	var stored *Grant
	if old != nil {
		stored, _ = decodeGrant(serverURL, file, old) // unreadable: replaced
	}
	switch {
	case next.IssuedAt.IsZero():
		next.IssuedAt = issueAfter(stored)
	case stored != nil && stored.IssuedAt.After(next.IssuedAt):
		return fmt.Errorf("%w: %s holds a grant issued at %s, this one was issued at %s; kept the stored one",
			ErrOlderGrant, file, stored.IssuedAt.Format(time.RFC3339Nano), next.IssuedAt.Format(time.RFC3339Nano))
	}
	data, err := json.MarshalIndent(&next, "", "  ")
	if err != nil {
		return err
	}
	return l.Write(data, 0o600)
}

// Fresh returns a grant for serverURL to use in place of held, the grant this
// process has been using, whose token has expired; it blocks while another
// process refreshes the grant. Under the lock of the grant's file it re-reads the
// stored grant:
//
//   - when the stored grant is newer than held (another process refreshed it, or
//     the person logged in again) and its token is valid, Fresh returns it
//     without refreshing;
//   - otherwise it calls refresh with the newest grant of the two (refresh uses
//     its refresh token at its token endpoint and returns the grant with the new
//     token, the old refresh token kept if none came), stores the result stamped
//     with IssuedAt (written as Save writes) and returns it.
//
// The lock is held across refresh, so of the processes and goroutines that hold
// one grant only the first refreshes it and the others take its result: with
// rotating refresh tokens none presents a refresh token already used. refresh
// must therefore not wait for long (bound its request).
//
// When refresh fails Fresh returns a *RefreshError and leaves the stored grant as
// it was. A stored file that is missing (removed since held was loaded) or
// unreadable is an error naming it and is not written. When the refreshed grant
// cannot be stored Fresh returns it with the error: the new token works in this
// process, but other processes and later starts hold a refresh token that may be
// spent. Safe for concurrent use.
func (s TokenStore) Fresh(serverURL string, held *Grant, refresh func(*Grant) (*Grant, error)) (*Grant, error) {
	file := s.Path(serverURL)
	l, err := grantPolicy.Lock(file)
	if err != nil {
		return nil, fmt.Errorf("mcp: refresh the OAuth token for %s: %w", RedactURL(serverURL), err)
	}
	defer l.Unlock()
	data, err := l.Read()
	if errors.Is(err, filestore.ErrRefused) {
		return nil, fmt.Errorf("mcp: refresh the OAuth token for %s: %w (or log in again to replace it)", RedactURL(serverURL), err)
	}
	if err != nil {
		return nil, fmt.Errorf("mcp: refresh the OAuth token for %s: read %s: %w", RedactURL(serverURL), file, err)
	}
	if data == nil {
		return nil, fmt.Errorf("mcp: refresh the OAuth token for %s: its token file %s was removed; log in again", RedactURL(serverURL), file)
	}
	stored, err := decodeGrant(serverURL, file, data)
	if err != nil {
		return nil, err
	}
	base := held
	if stored.newerThan(held) {
		if stored.Token.Valid() {
			return stored, nil
		}
		base = stored // its refresh token is the live one
	}
	next, err := refresh(base)
	if err != nil {
		re := &RefreshError{Server: serverURL, TokenURL: base.TokenURL, Err: err}
		var rerr *oauth2.RetrieveError
		if errors.As(err, &rerr) {
			re.Code = rerr.ErrorCode
		}
		return nil, re
	}
	next.IssuedAt = issueAfter(stored, base)
	out, err := json.MarshalIndent(next, "", "  ")
	if err == nil {
		err = l.Write(out, 0o600)
	}
	if err != nil {
		return next, fmt.Errorf("mcp: refreshed the OAuth token for %s but could not store it in %s: %w", RedactURL(serverURL), file, err)
	}
	return next, nil
}

// newerThan reports whether g, read from the store, replaced h since h was read
// or stored: it differs from h and is not older by IssuedAt. A stored grant
// without IssuedAt that differs from h was written by an older toolhost after h
// was read, so it counts as newer.
func (g *Grant) newerThan(h *Grant) bool {
	same := g.IssuedAt.Equal(h.IssuedAt) && g.Token.AccessToken == h.Token.AccessToken && g.Token.RefreshToken == h.Token.RefreshToken
	if same {
		return false
	}
	return g.IssuedAt.IsZero() || !g.IssuedAt.Before(h.IssuedAt)
}

// issueAfter returns now, or a moment after the latest IssuedAt of grants when
// the clock has gone back since: the store's IssuedAt never decreases.
func issueAfter(grants ...*Grant) time.Time {
	t := time.Now().UTC().Round(0)
	for _, g := range grants {
		if g != nil && !t.After(g.IssuedAt) {
			t = g.IssuedAt.Add(time.Nanosecond)
		}
	}
	return t
}
