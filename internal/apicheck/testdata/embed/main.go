// Command embed is an application that embeds the registry with in-process tools
// only: its own typed tool and the built-in file tools. TestEmbedderLinksNoRPC lists
// what it links.
package main

import (
	"context"
	"log"
	"os"

	"github.com/toolhost/toolhost/builtin"
	"github.com/toolhost/toolhost/fsys"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/tool"
)

func main() {
	ctx := context.Background()
	root := scope.New(ctx)
	defer root.Close(ctx)
	reg, err := registry.New(registry.Options{})
	if err != nil {
		log.Fatal(err)
	}
	files, err := fsys.New(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	perm, err := permission.New(permission.Options{})
	if err != nil {
		log.Fatal(err)
	}
	tools := builtin.Tools(files, perm)
	tools["greet"] = tool.New("Greets.", func(ctx context.Context, inv tool.Invocation, in struct{ Name string }) (string, error) {
		return "hello " + in.Name, nil
	})
	release, err := reg.Register(registry.Batch{Source: registry.Source{Kind: "application"}, Tools: tools})
	if err != nil {
		log.Fatal(err)
	}
	defer release()
}
