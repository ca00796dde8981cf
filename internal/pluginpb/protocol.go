// Package pluginpb is the wire protocol between the toolhost host and plugin
// processes: the generated gRPC code for plugin.proto, plus the go-plugin handshake and
// the constants both sides share.
package pluginpb

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/hashicorp/go-plugin"
)

// Handshake is the fixed go-plugin handshake. A binary that does not present it is
// refused before any RPC.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "TOOLHOST_PLUGIN",
	MagicCookieValue: "d3c4f1a0-toolhost-plugin-v1",
}

// PluginName is the key of the one plugin in the go-plugin plugin set.
const PluginName = "toolhost"

// ChunkSize is the largest payload of one streamed event, well under gRPC's 4 MiB
// default message limit.
const ChunkSize = 1 << 20

// ReattachEnv names the environment variable that maps plugin names (as in the
// Location config) to Reattach JSON, so the host attaches to plugins started by hand
// (for example under a debugger with -debug) instead of launching them.
const ReattachEnv = "TOOLHOST_REATTACH"

// Reattach is the JSON form of go-plugin's ReattachConfig.
type Reattach struct {
	Pid     int    `json:"pid"`
	Network string `json:"network"`
	Address string `json:"address"`
}

// ReattachFrom converts a go-plugin ReattachConfig to its JSON form.
func ReattachFrom(rc *plugin.ReattachConfig) Reattach {
	return Reattach{Pid: rc.Pid, Network: rc.Addr.Network(), Address: rc.Addr.String()}
}

// Config converts r back to a go-plugin ReattachConfig.
func (r Reattach) Config() (*plugin.ReattachConfig, error) {
	var addr net.Addr
	var err error
	switch r.Network {
	case "unix":
		addr, err = net.ResolveUnixAddr("unix", r.Address)
	case "tcp":
		addr, err = net.ResolveTCPAddr("tcp", r.Address)
	default:
		return nil, fmt.Errorf("pluginpb: reattach: unknown network %q", r.Network)
	}
	if err != nil {
		return nil, fmt.Errorf("pluginpb: reattach: %w", err)
	}
	return &plugin.ReattachConfig{
		Protocol:        plugin.ProtocolGRPC,
		ProtocolVersion: int(Handshake.ProtocolVersion),
		Pid:             r.Pid,
		Addr:            addr,
		Test:            true,
	}, nil
}

// ParseReattach parses the value of ReattachEnv.
func ParseReattach(value string) (map[string]Reattach, error) {
	var m map[string]Reattach
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		return nil, fmt.Errorf("pluginpb: parse %s: %w", ReattachEnv, err)
	}
	return m, nil
}
