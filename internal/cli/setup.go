package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/server"
)

// openRegistry opens the default managed storage and a registry over it, as every
// command that settles calls does; obs, if set, observes its settlements.
func openRegistry(obs registry.Observer) (*registry.Registry, error) {
	dir, err := registry.DefaultStorageDir()
	if err != nil { // only when HOME is unset, and neither variable before it is set
		return nil, fmt.Errorf("%w: set TOOLHOST_OUTPUT_DIR, XDG_DATA_HOME (an absolute path) or HOME", err)
	}
	st, err := registry.OpenStorage(dir, registry.StorageOptions{})
	if err != nil {
		return nil, err
	}
	return registry.New(registry.Options{Storage: st, Observer: obs})
}

// writeToken makes a new bearer token and writes it, alone, to file made absolute.
// It returns the file's path and the token; removeToken undoes it.
func writeToken(file string) (path, token string, err error) {
	if path, err = filepath.Abs(file); err != nil {
		return "", "", err
	}
	if token, err = server.NewToken(); err != nil {
		return "", "", err
	}
	return path, token, server.WriteTokenFile(path, token)
}

// removeToken removes the token file at path if it still holds token (another
// server may have replaced it since).
func removeToken(path, token string) {
	if data, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(data)) == token {
		os.Remove(path)
	}
}
