package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/toolhost/toolhost/registry"
)

// callAttrKey is what the call metrics are broken down by. The source is kept as
// its kind and name, so that a settlement looks its breakdown up without making
// the source's ID (registry.Source.ID).
type callAttrKey struct{ location, sourceKind, sourceName, tool, outcome string }

// maxCachedAttrSets bounds attrCache: tool names come from sources, so their
// number is not ours to bound. It is above the SDK's own limit of attribute sets
// per instrument (2000), past which the SDK reports measurements under the
// overflow set anyway.
const maxCachedAttrSets = 4096

// callOpts is one breakdown of the call metrics: its calls so far, which the
// toolhost.calls counter reports when read, its call durations, which a
// durationProducer reports, and its attribute set (sorted and hashed once), so
// that a settlement records without building a set.
type callOpts struct {
	calls    atomic.Int64
	duration histogram
	start    time.Time // of the breakdown: its metrics' start time
	set      attribute.Set
	observe  []metric.ObserveOption
}

func newCallOpts(set attribute.Set) *callOpts {
	return &callOpts{start: time.Now(), set: set, observe: []metric.ObserveOption{metric.WithAttributeSet(set)}}
}

// attrCache keeps the breakdowns of the call metrics. Past maxCachedAttrSets it
// counts a new breakdown under the overflow set, {otel.metric.overflow=true}, as
// the SDK does past its limit. It is safe for concurrent use.
type attrCache struct {
	mu       sync.RWMutex
	sets     map[callAttrKey]*callOpts
	overflow *callOpts
	interval bool // a delta reader takes the durations' intervals; set before any call, then only read
}

func (c *attrCache) get(k callAttrKey) *callOpts {
	c.mu.RLock()
	opts, ok := c.sets[k]
	c.mu.RUnlock()
	if ok {
		return opts
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if opts, ok := c.sets[k]; ok {
		return opts
	}
	if c.sets == nil {
		c.sets = map[callAttrKey]*callOpts{}
	}
	if len(c.sets) >= maxCachedAttrSets {
		if c.overflow == nil {
			c.overflow = newCallOpts(attribute.NewSet(attribute.Bool("otel.metric.overflow", true)))
		}
		return c.overflow
	}
	opts = newCallOpts(attribute.NewSet(
		attribute.String("toolhost.location", k.location),
		attribute.String("toolhost.source", registry.Source{Kind: k.sourceKind, Name: k.sourceName}.ID()),
		attribute.String("toolhost.tool", k.tool),
		attribute.String("toolhost.outcome", k.outcome),
	))
	c.sets[k] = opts
	return opts
}

// observeCalls reports every breakdown's calls so far to the toolhost.calls
// counter: a callback of the meter, run when the metrics are read. Counting in
// the breakdown rather than through the SDK's Add spares each settlement the
// SDK's check of the attribute set, which it makes by reflection on every Add.
func (c *attrCache) observeCalls(_ context.Context, o metric.Observer, calls metric.Int64ObservableCounter) {
	c.each(func(opts *callOpts) { o.ObserveInt64(calls, opts.calls.Load(), opts.observe...) })
}

// each calls f with every breakdown, the overflow set's last, holding c's read
// lock: f must not call get.
func (c *attrCache) each(f func(*callOpts)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, opts := range c.sets {
		f(opts)
	}
	if c.overflow != nil {
		f(c.overflow)
	}
}
