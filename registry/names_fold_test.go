package registry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// Names that differ only by letter case are one name in a Location: a case variant
// of a name another source holds is a takeover like the name itself.
func TestCaseVariantsAreTakeovers(t *testing.T) {
	one := func(name, answer string) map[string]sdk.Tool { return map[string]sdk.Tool{name: constTool(answer)} }
	for _, variant := range []string{"Read", "READ", "rEaD"} {
		t.Run("ToolNamed"+variant+"BesideTheBuiltinRead", func(t *testing.T) {
			r := hosttest.Registry(t, registry.Options{})
			hosttest.OpenLocation(t, r, "/ws")
			register(t, r, registry.Batch{Location: "/ws", Source: builtinSrc, Tools: one("read", "builtin")})
			_, err := r.Register(registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{
				variant: constTool("impostor"), "other": constTool("other"),
			}})
			var rerr *registry.RegistrationError
			if !errors.As(err, &rerr) || !errors.Is(err, registry.ErrNameTaken) || rerr.Tool != variant || rerr.Owner != "builtin" || rerr.Held != "read" {
				t.Fatalf("err = %v (%+v); want %q refused as the builtin's read", err, rerr, variant)
			}
			if !strings.Contains(err.Error(), "only by letter case") || !strings.Contains(err.Error(), `"read"`) {
				t.Errorf("error %q does not say which name it collides with", err)
			}
			q, _ := r.Prepare("/ws")
			if defs := q.Definitions(); len(defs) != 1 || defs[0].Name != "read" {
				t.Errorf("definitions %v, want the built-in's read alone", defs)
			}
		})
	}
	t.Run("TheHolderRegisteringLaterIsRefusedToo", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: one("Search", "p")})
		_, err := r.Register(registry.Batch{Location: "/ws", Source: otherSrc, Tools: one("search", "q")})
		var rerr *registry.RegistrationError
		if !errors.As(err, &rerr) || rerr.Owner != pluginSrc.String() || rerr.Held != "Search" {
			t.Fatalf("err = %v; want search refused as plugin p's Search", err)
		}
	})
	t.Run("SourcesDifferingByCaseAreTwoSources", func(t *testing.T) {
		// A plugin named "P" is not a generation of plugin "p": it cannot take p's
		// names, spelled either way.
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: one("p_tool", "p")})
		upper := registry.Source{Kind: pluginSrc.Kind, Name: strings.ToUpper(pluginSrc.Name), Generation: pluginSrc.Generation + 1}
		for _, name := range []string{"p_tool", "P_TOOL"} {
			_, err := r.Register(registry.Batch{Location: "/ws", Source: upper, Tools: one(name, "P")})
			var rerr *registry.RegistrationError
			if !errors.As(err, &rerr) || !errors.Is(err, registry.ErrNameTaken) || rerr.Owner != pluginSrc.String() {
				t.Fatalf("%s from %s: err = %v; want refused, naming %s", name, upper, err, pluginSrc)
			}
		}
		if got := answer(t, r, "/ws", "p_tool"); got != "p" {
			t.Errorf("p_tool answers %q, want plugin p's", got)
		}
	})
	t.Run("OneSourceKeepsItsOwnCaseVariants", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: one("Get", "a")})
		next := pluginSrc
		next.Generation++
		register(t, r, registry.Batch{Location: "/ws", Source: next, Tools: one("get", "b")})
	})
	t.Run("AnAllowedOverrideTakesTheVariantItNames", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: builtinSrc, Tools: one("read", "builtin")})
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Overrides: []string{"Read"}, Tools: one("Read", "plugin")})
		_, err := r.Register(registry.Batch{Location: "/ws", Source: otherSrc, Overrides: []string{"read"}, Tools: one("READ", "q")})
		if !errors.Is(err, registry.ErrNameTaken) {
			t.Fatalf("READ with an override of read only: err = %v, want ErrNameTaken", err)
		}
	})
}
