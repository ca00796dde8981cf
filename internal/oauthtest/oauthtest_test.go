package oauthtest_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/toolhost/toolhost/internal/oauthtest"
)

// refresh presents rt at a's token endpoint and returns the status and the reply.
func refresh(t *testing.T, a *oauthtest.Server, rt string) (int, map[string]any) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.PostForm(a.URL()+"/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {"c"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("reply (%s): %v", resp.Header.Get("Content-Type"), err)
	}
	return resp.StatusCode, body
}

// TestRefreshRotatesAndDetectsReuse: a refresh hands out a new refresh token and
// spends the old; presenting the old again is refused with invalid_grant and
// revokes the tokens issued from it.
func TestRefreshRotatesAndDetectsReuse(t *testing.T) {
	a := oauthtest.New(t)
	access0, r0 := a.Issue()
	status, body := refresh(t, a, r0)
	r1, _ := body["refresh_token"].(string)
	access1, _ := body["access_token"].(string)
	if status != http.StatusOK || r1 == "" || r1 == r0 || access1 == "" {
		t.Fatalf("refresh: %d %v", status, body)
	}
	if !a.Valid(access0) || !a.Valid(access1) {
		t.Errorf("access tokens valid: %v %v; want both", a.Valid(access0), a.Valid(access1))
	}
	status, body = refresh(t, a, r0)
	if status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Fatalf("reused refresh token: %d %v; want 400 invalid_grant", status, body)
	}
	if a.Valid(access1) || a.Valid(access0) {
		t.Error("the reuse did not revoke the family's access tokens")
	}
	if status, body := refresh(t, a, r1); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("the family's live refresh token after a reuse: %d %v; want it revoked", status, body)
	}
	if a.Refreshed() != 1 || a.Rejected() != 2 || a.Reused() != 1 {
		t.Errorf("refreshed %d, rejected %d, reused %d; want 1, 2, 1", a.Refreshed(), a.Rejected(), a.Reused())
	}
	other0, otherR := a.Issue() // another family is untouched
	if !a.Valid(other0) {
		t.Error("a new family's token is not valid")
	}
	if status, _ := refresh(t, a, otherR); status != http.StatusOK {
		t.Errorf("another family's refresh: %d", status)
	}
}
