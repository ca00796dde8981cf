package plugins

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/toolhost/toolhost/internal/pluginpb"
)

func TestAdmitBoundsRegistrationsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inst := &Instance{cfg: Config{Name: "p"}, registering: make(chan struct{}, maxRegistrations)}
		register := &tap.Info{FullMethodName: pluginpb.Tools_Register_FullMethodName}
		var cancels []context.CancelFunc
		for range maxRegistrations {
			ctx, cancel := context.WithCancel(context.Background())
			cancels = append(cancels, cancel)
			if _, err := inst.admit(ctx, register); err != nil {
				t.Fatalf("registration within the bound refused: %v", err)
			}
		}
		_, err := inst.admit(context.Background(), register)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `plugin "p" sent more than 2 registrations at once`) {
			t.Fatalf("registration past the bound: %v; want refused, saying why", err)
		}
		if _, err := inst.admit(context.Background(), &tap.Info{FullMethodName: pluginpb.Tools_Close_FullMethodName}); err != nil {
			t.Fatalf("a Close is not a registration: %v", err)
		}
		cancels[0]() // one call ends: its token comes back
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		if _, err := inst.admit(ctx, register); err != nil {
			t.Fatalf("after one ended: %v", err)
		}
		for _, c := range cancels {
			c()
		}
		synctest.Wait()
		if n := len(inst.registering); n != 0 {
			t.Fatalf("%d tokens held after every call ended", n)
		}
	})
}
