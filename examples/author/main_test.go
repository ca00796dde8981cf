package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/toolhost/toolhost/plugintest"
	"github.com/toolhost/toolhost/registry"
)

// bin is the plugin, built once for every test (and cached across runs by its sources).
var bin string

func TestMain(m *testing.M) {
	var err error
	if bin, err = plugintest.BuildOnce("."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestGreet(t *testing.T) {
	h := plugintest.Start(t, bin, plugintest.Options{})
	s, err := h.Call(t.Context(), "greet", GreetInput{Name: "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.Completed || s.Text() != "Hello, Ada!" {
		t.Errorf("got %s %q, want completed %q", s.Outcome, s.Text(), "Hello, Ada!")
	}
}

func TestGreetNobodyIsAToolFailure(t *testing.T) {
	h := plugintest.Start(t, bin, plugintest.Options{})
	s, err := h.Call(t.Context(), "greet", GreetInput{Name: " "})
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.ToolFailed {
		t.Errorf("got %s %q, want a tool failure", s.Outcome, s.Text())
	}
}
