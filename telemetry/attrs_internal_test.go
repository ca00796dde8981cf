package telemetry

import (
	"fmt"
	"testing"
)

// TestAttrCacheOverflows: past maxCachedAttrSets breakdowns, a new one is counted
// under the overflow set, as the SDK counts past its limit, and the cache stops
// growing; a breakdown seen before keeps its own.
func TestAttrCacheOverflows(t *testing.T) {
	var c attrCache
	first := c.get(callAttrKey{"/l", "plugin", "p", "tool0", "completed"})
	for i := 1; i < maxCachedAttrSets; i++ {
		c.get(callAttrKey{"/l", "plugin", "p", fmt.Sprint("tool", i), "completed"})
	}
	over := c.get(callAttrKey{"/l", "plugin", "p", "one more", "completed"})
	if over == first || c.get(callAttrKey{"/l", "plugin", "p", "and another", "completed"}) != over {
		t.Fatal("new breakdowns past the limit are not counted under one overflow set")
	}
	if c.get(callAttrKey{"/l", "plugin", "p", "tool0", "completed"}) != first || len(c.sets) != maxCachedAttrSets {
		t.Fatalf("the cache holds %d breakdowns, want %d, and the first one its own", len(c.sets), maxCachedAttrSets)
	}
	if v, ok := over.set.Value("otel.metric.overflow"); !ok || !v.AsBool() {
		t.Errorf("overflow set %v", over.set.ToSlice())
	}
}
