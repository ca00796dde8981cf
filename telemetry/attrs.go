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

// attrCache keeps the measurement option (an attribute set, sorted and hashed
// once) of each breakdown of the call metrics, so that a settlement records them
// without building a set. Past maxCachedAttrSets entries it builds a set per call.
// It is safe for concurrent use.
type attrCache struct {
	mu   sync.RWMutex
	sets map[callAttrKey]metric.MeasurementOption
}

func (c *attrCache) get(k callAttrKey) metric.MeasurementOption {
	c.mu.RLock()
	opt, ok := c.sets[k]
	c.mu.RUnlock()
	if ok {
		return opt
	}
	opt = metric.WithAttributeSet(attribute.NewSet(
		attribute.String("toolhost.location", k.location),
		attribute.String("toolhost.source", k.source),
		attribute.String("toolhost.tool", k.tool),
		attribute.String("toolhost.outcome", k.outcome),
	))
	c.mu.Lock()
	if c.sets == nil {
		c.sets = map[callAttrKey]metric.MeasurementOption{}
	}
	if len(c.sets) < maxCachedAttrSets {
		c.sets[k] = opt
	}
	c.mu.Unlock()
	return opt
}
