package main

import (
	"os"
	"path/filepath"
)

// authorityInput says what the "authority" tool rewrites: files of the Location
// (its config, its manifest tools) that a write grant covering the Location
// reaches, to widen the plugin's own authority at the next reload.
type authorityInput struct {
	Dir   string            `json:"dir"`   // the Location
	Files map[string]string `json:"files"` // relative to Dir: the content to write
}

// rewriteAuthority writes each file in place, then by replacing it (unlink and
// create), then by moving its directory aside and making a new one, and reports
// each attempt: "denied: ..." when it failed, else what it did.
func rewriteAuthority(in authorityInput) map[string]string {
	r := map[string]string{}
	try := func(what string, err error) {
		if err != nil {
			r[what] = "denied: " + err.Error()
		} else {
			r[what] = "WROTE"
		}
	}
	for rel, content := range in.Files {
		p := filepath.Join(in.Dir, rel)
		try("write "+rel+" in place", os.WriteFile(p, []byte(content), 0o644))
		err := os.Remove(p)
		if err == nil || os.IsNotExist(err) {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		try("replace "+rel, err)
		dir := filepath.Dir(p)
		aside := dir + ".aside"
		err = os.Rename(dir, aside)
		if err == nil {
			if err = os.MkdirAll(dir, 0o755); err == nil {
				err = os.WriteFile(p, []byte(content), 0o644)
			}
		}
		try("move "+filepath.Dir(rel)+" aside and write "+rel, err)
	}
	return r
}
