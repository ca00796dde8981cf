package permission_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/sdk"
)

// terminal stands in for a runner's Asker: it answers every ask with "once".
type terminal struct{}

func (terminal) Ask(_ context.Context, id string, req permission.Request) (permission.Answer, error) {
	fmt.Printf("asked: %s %v\n", req.Action, req.Resources)
	return permission.Answer{Reply: permission.Once}, nil
}

func ExampleService_Assert() {
	perm, err := permission.New(permission.Options{
		Rules: []permission.Rule{
			{Action: "read", Resource: "*", Effect: permission.Allow},
			{Action: "read", Resource: ".env", Effect: permission.Deny},
			{Action: "bash", Resource: "git *", Effect: permission.Ask},
		},
		Asker:      terminal{},
		ConfigHint: ".toolhost/config.json",
	})
	if err != nil {
		panic(err)
	}
	defer perm.Close()
	ctx := context.Background()

	fmt.Println(perm.Assert(ctx, permission.Request{SessionID: "s", Action: "read", Resources: []string{"main.go"}}))
	err = perm.Assert(ctx, permission.Request{SessionID: "s", Action: "read", Resources: []string{".env"}})
	var failure *sdk.ToolFailure
	fmt.Println(errors.As(err, &failure), errors.Is(err, permission.ErrDenied))
	fmt.Println(perm.Assert(ctx, permission.Request{SessionID: "s", Action: "bash", Resources: []string{"git"}}))
	// Output:
	// <nil>
	// true true
	// asked: bash [git]
	// <nil>
}
