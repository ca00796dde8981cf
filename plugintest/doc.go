// Package plugintest runs a toolhost plugin against a real host inside go test.
//
// A plugin author tests the binary the host will run, not its functions in
// isolation: [Build] compiles the plugin package with go build, and [Start]
// launches the binary through the same code path a Location uses (the plugins
// package's supervisor, the go-plugin handshake, the broker-served Tools
// capability) into a fresh registry and Location placement. Calls settle
// through the registry's whole pipeline — input and output validation,
// projection, bounding — so a test sees exactly the settlement a session
// runner would:
//
//	func TestUpper(t *testing.T) {
//		h := plugintest.Start(t, plugintest.Build(t, "."), plugintest.Options{})
//		s, err := h.Call(t.Context(), "upper", map[string]string{"text": "hi"})
//		if err != nil {
//			t.Fatal(err)
//		}
//		if s.Outcome != registry.Completed || s.Text() != "HI" {
//			t.Errorf("got %s %q", s.Outcome, s.Text())
//		}
//	}
//
// Build keeps binaries in toolhost's content-addressed build cache, so tests
// with unchanged sources share one build ([BuildOnce] does it from TestMain).
// [TryStart] returns a plugin's start or activation failure for a test that
// asserts it.
//
// [Options] sets what a Location config entry would: options, env, trust,
// permission rules, grants, call timeout and overrides. A tool that asks the
// person (sdk.Ask) or the model (sdk.Sample) is answered by Options.Answerer: a
// [Script] of answers and completions given in order, or an [Answerer] of
// functions:
//
//	h := plugintest.Start(t, bin, plugintest.Options{
//		Grants: []plugins.Grant{plugins.GrantAsk, plugins.GrantSample},
//		Answerer: &plugintest.Script{
//			Completions: []sdk.SampleResult{plugintest.Completion("Ode")},
//			Answers:     []sdk.Answer{plugintest.Accept(map[string]string{"title": "Ode"})},
//		},
//	})
//
// Everything Start creates is closed by the test's cleanup, which also fails
// the test if a plugin process outlived the close. Progress events and full
// control over the call (invocation ids, a cancellable context) are available
// through [Host.Settle].
package plugintest
