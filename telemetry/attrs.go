package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// callAttrKey is what the call metrics are broken down by.
type callAttrKey struct{ location, source, tool, outcome string }

// maxCachedAttrSets bounds attrCache: tool names come from sources, so their
// number is not ours to bound.
const maxCachedAttrSets = 4096

// callOpts are the measurement options of one breakdown of the call metrics, as
// the slices Add and Record take, so that recording allocates no slice for them.
type callOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// attrCache keeps the measurement options (an attribute set, sorted and hashed
// once) of each breakdown of the call metrics, so that a settlement records them
// without building a set. Past maxCachedAttrSets entries it builds a set per call.
// It is safe for concurrent use.
type attrCache struct {
	mu   sync.RWMutex
	sets map[callAttrKey]*callOpts
}

func (c *attrCache) get(k callAttrKey) *callOpts {
	c.mu.RLock()
	opts, ok := c.sets[k]
	c.mu.RUnlock()
	if ok {
		return opts
	}
	opt := metric.WithAttributeSet(attribute.NewSet(
		attribute.String("toolhost.location", k.location),
		attribute.String("toolhost.source", k.source),
		attribute.String("toolhost.tool", k.tool),
		attribute.String("toolhost.outcome", k.outcome),
	))
	opts = &callOpts{add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
	c.mu.Lock()
	if c.sets == nil {
		c.sets = map[callAttrKey]*callOpts{}
	}
	if len(c.sets) < maxCachedAttrSets {
		c.sets[k] = opts
	}
	c.mu.Unlock()
	return opts
}
