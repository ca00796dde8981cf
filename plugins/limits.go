package plugins

import (
	"context"
	"encoding/base64"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/registry"
)

// maxRegistrations is how many registrations of one plugin the host receives at a
// time. A plugin's own connection to its Tools capability is told so (HTTP/2's
// concurrent streams), so a well-behaved plugin's further registrations wait their
// turn in its gRPC client; registrations past it on more connections are refused.
const maxRegistrations = 2

// registerMessageLimit is the largest message the host reads from a plugin with
// limits l over its Tools capability: twice the definition bytes the plugin may
// hold at all (its schemas need not come canonical, and the names and titles are
// not counted), and 1 MiB. A larger message is refused from its length prefix,
// before it is read.
func registerMessageLimit(l registry.SourceLimits) int {
	held := l.MaxSchemaBytes
	if held <= 0 {
		held = registry.DefaultMaxSchemaBytes
	}
	return int(min(2*held+1<<20, 1<<30))
}

// maxHeaderBytes is the most HTTP/2 header bytes (gRPC metadata, a status and its
// message, as HPACK counts them) the host takes in one header block from a plugin,
// on its connection to the plugin and on every capability it serves. gRPC takes
// 16 MiB by default, which no message limit and no byte budget counts, and
// decodes it before any handler or interceptor sees it; a block past this is
// refused as it is decoded (no string longer than it is allocated), failing its
// call. The host's own protocol sends well under 1 KiB.
const maxHeaderBytes = 64 << 10

// maxTitleBytes is the longest title a plugin's tool may have: a title is a short
// name for people, and the registry counts it against no limit of the plugin's
// (max_schema_bytes counts descriptions and schemas), so without it a plugin could
// make the host hold a registration message's worth for each of its max_tools
// tools. A batch with a longer title is refused.
const maxTitleBytes = 1 << 10

// maxDefectStack is the most of a defect's stack the host keeps (a plugin's panic,
// which the plugin reports with its stack): a Go panic's goroutine stack is a few
// KiB, and the rest of a longer one is the plugin's to fill. A defect's message is
// cut to loglimit.MaxText.
const maxDefectStack = 64 << 10

// serviceMessageLimit is the largest message the host reads from a trusted plugin
// over its Location services (paths, patterns): gRPC's default.
const serviceMessageLimit = 4 << 20

// activationLineLimit is the longest activation line the host reads from a plugin
// with limits l: the registrations of its activation, in base64, as one message
// over its Tools capability may hold them.
func activationLineLimit(l registry.SourceLimits) int {
	return base64.StdEncoding.EncodedLen(registerMessageLimit(l)) + 1<<10
}

// admit lets a Register call of the plugin's be received only while fewer than
// maxRegistrations are; it runs as each call arrives, before its message is read
// (gRPC's tap). Its token is given back when the call ends, whichever way.
func (inst *Instance) admit(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != pluginpb.Tools_Register_FullMethodName {
		return ctx, nil
	}
	select {
	case inst.registering <- struct{}{}:
		context.AfterFunc(ctx, func() { <-inst.registering })
		return ctx, nil
	default:
		return nil, status.Errorf(codes.ResourceExhausted,
			"plugin %q sent more than %d registrations at once; the host takes them one after another", inst.cfg.Name, maxRegistrations)
	}
}
