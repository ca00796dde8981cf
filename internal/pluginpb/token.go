package pluginpb

import (
	"context"
	"crypto/subtle"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// HostTokenEnv carries a per-launch secret from the host to the plugin. The host
// sends it with every call; the plugin's server refuses calls without it. It stands
// in for the peer-pid check where that cannot tell the host apart: a plugin in its
// own PID namespace sees every process outside it, the host and other sources
// alike, as pid 0.
const HostTokenEnv = "TOOLHOST_HOST_TOKEN"

const tokenKey = "toolhost-host-token"

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{tokenKey: string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return false }

// TokenDialOption sends token with every call on the connection.
func TokenDialOption(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(tokenCreds(token))
}

// TokenServerOptions refuse every call that does not carry token.
func TokenServerOptions(token string) []grpc.ServerOption {
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(tokenKey); len(v) == 1 && subtle.ConstantTimeCompare([]byte(v[0]), []byte(token)) == 1 {
			return nil
		}
		return status.Error(codes.PermissionDenied, "not the host that launched this plugin")
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
