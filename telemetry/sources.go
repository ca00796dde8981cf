package telemetry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/toolhost/toolhost/location"
)

// Watch follows the Location loc until the returned stop is called or loc closes:
// its sources appear in the source and storage metrics, each change of a source's
// state, generation or restarts writes an audit line, and so do its activation, a
// change of its config (seen as loc.Config() changing) and its end. stop waits for
// the watcher to end and is idempotent.
func (t *Telemetry) Watch(loc *location.Location) (stop func()) {
	if t == nil || !t.on() {
		return func() {}
	}
	id := loc.ID()
	t.mu.Lock()
	t.locations[id] = loc
	t.mu.Unlock()
	// The config in force now is the activation's: a reload made before the
	// goroutine runs is then a change.
	cfg := loc.Config()
	t.auditConfig(id, cfg, "activated")
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]location.SourceStatus{}
		check := func() {
			for _, st := range loc.Sources() {
				if prev, ok := last[st.ID]; !ok || sourceChanged(prev, st) {
					last[st.ID] = st
					t.auditSource(id, st)
				}
			}
			if c := loc.Config(); c != cfg {
				cfg = c
				t.auditConfig(id, cfg, "changed")
			}
		}
		for {
			changed := loc.SourcesChanged()
			check()
			select {
			case <-changed:
				continue
			case <-loc.Done():
			case <-quit:
			}
			break
		}
		check() // a change made before stop or the close, whichever select chose
		t.auditConfig(id, cfg, "deactivated")
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
		t.mu.Lock()
		if t.locations[id] == loc {
			delete(t.locations, id)
		}
		t.mu.Unlock()
	}
}

func sourceChanged(a, b location.SourceStatus) bool {
	return a.State != b.State || a.Generation != b.Generation || a.Restarts != b.Restarts || a.PID != b.PID
}

func (t *Telemetry) auditSource(loc string, st location.SourceStatus) {
	if t.audit == nil {
		return
	}
	line := auditSource{
		auditHead:   auditHead{Time: time.Now().UTC(), Event: "source", Location: loc},
		Source:      st.ID,
		State:       string(st.State),
		Generation:  st.Generation,
		Restarts:    st.Restarts,
		PID:         st.PID,
		Containment: st.Containment,
		Confined:    st.Confined,
	}
	if st.Err != nil {
		line.Error = st.Err.Error()
	}
	t.audit.write(line)
}

// auditConfig writes a config line with the size and SHA-256 of cfg, the config in
// force, as its JSON encoding: the config as toolhost decoded it (imported MCP
// configs included), not the file, which may have changed again since it was
// applied.
func (t *Telemetry) auditConfig(loc string, cfg *location.Config, change string) {
	if t.audit == nil {
		return
	}
	line := auditConfig{auditHead: auditHead{Time: time.Now().UTC(), Event: "config", Location: loc}, Change: change}
	if data, err := json.Marshal(cfg); err == nil {
		sum := sha256.Sum256(data)
		line.ConfigBytes, line.ConfigSHA256 = len(data), hex.EncodeToString(sum[:])
	}
	t.audit.write(line)
}

// observeSources reports the source and storage gauges of the watched Locations.
func (t *Telemetry) observeSources(o metric.Observer, state metric.Int64ObservableGauge, restarts metric.Int64ObservableCounter,
	contained, storage metric.Int64ObservableGauge) {
	t.mu.Lock()
	locs := make([]*location.Location, 0, len(t.locations))
	for _, l := range t.locations {
		locs = append(locs, l)
	}
	t.mu.Unlock()
	st := t.storage.Load()
	for _, l := range locs {
		locAttr := attribute.String("toolhost.location", l.ID())
		if st != nil {
			if used, err := st.Usage(l.ID()); err == nil {
				o.ObserveInt64(storage, used, metric.WithAttributes(locAttr))
			}
		}
		for _, s := range l.Sources() {
			src := attribute.String("toolhost.source", s.ID)
			o.ObserveInt64(state, 1, metric.WithAttributes(locAttr, src, attribute.String("toolhost.state", string(s.State))))
			o.ObserveInt64(restarts, int64(s.Restarts), metric.WithAttributes(locAttr, src))
			if s.Containment != "" {
				o.ObserveInt64(contained, 1, metric.WithAttributes(locAttr, src,
					attribute.String("toolhost.containment", s.Containment),
					attribute.String("toolhost.confined", strconv.FormatBool(s.Confined))))
			}
		}
	}
}
