package sdk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/toolhost/toolhost/internal/pluginpb"
)

// dialDelay is how long after an activation the plugin waits before dialling a
// capability of the host it has not used yet: go-plugin forgets a broker id's
// connection details 5 s after they arrive, so the dial must come before then.
// Waiting keeps the connections' setup out of the host's launches, which run for a
// few milliseconds.
const dialDelay = time.Second

// capability is a connection to one of the host's capabilities (go-plugin broker
// id), dialled the first time it is used, or dialDelay after the activation
// (dialLater). It is a grpc.ClientConnInterface, so the generated clients take it
// as it is. The connection lives as long as the process, which lives as long as
// its scope in the host.
type capability struct {
	server *pluginServer
	id     uint32
	what   string // the capability, for errors: "the Tools capability"

	once sync.Once
	conn *grpc.ClientConn
	err  error
}

func (s *pluginServer) capability(id uint32, what string) *capability {
	return &capability{server: s, id: id, what: what}
}

// dial returns the connection, dialling it the first time. An activation at the
// start runs before the plugin's server is up: dial waits for the server's broker.
func (c *capability) dial() (*grpc.ClientConn, error) {
	c.once.Do(func() {
		<-c.server.brokerSet
		c.conn, c.err = c.server.broker.DialWithOptions(c.id, pluginpb.DialOptions()...)
		if c.err != nil {
			c.err = fmt.Errorf("sdk: dial %s: %w", c.what, c.err)
		}
	})
	return c.conn, c.err
}

// dialLater dials dialDelay from now, unless a use dialled sooner.
func (c *capability) dialLater() {
	time.AfterFunc(dialDelay, func() { _, _ = c.dial() })
}

func (c *capability) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	return conn.Invoke(ctx, method, args, reply, opts...)
}

func (c *capability) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return conn.NewStream(ctx, desc, method, opts...)
}
