// SPDX-License-Identifier: Apache-2.0
// containerd's own snapshotter conformance suite (snapshots/testsuite),
// run against a snapshotter served as a containerd proxy plugin.
//
// SNAPSHOTTER_CMD is run once per test with ROOT and SOCK replaced by a
// fresh state directory and its socket path; the suite talks to it over
// containerd's snapshots gRPC API, as containerd would. Without it, the
// suite runs against containerd's in-process overlayfs snapshotter (the
// reference answer). TestCount, ours, counts what a daemon lists;
// TestPrepare, ours, makes one Prepare (or Remove) with labels.
package suite

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/pkg/testutil"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/containerd/snapshots/overlay"
	"github.com/containerd/containerd/snapshots/proxy"
	"github.com/containerd/containerd/snapshots/testsuite"
	"google.golang.org/grpc"
)

// dial: the snapshotter served on the unix socket sock, through
// containerd's proxy client, as containerd talks to a proxy plugin.
func dial(sock string) (snapshots.Snapshotter, *grpc.ClientConn, error) {
	conn, err := grpc.Dial("unix://"+sock, grpc.WithInsecure(),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(a, "unix://"))
		}))
	if err != nil {
		return nil, nil, err
	}
	return proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(conn), "proxy"), conn, nil
}

func proxied(cmdline string) testsuite.SnapshotterFunc {
	return func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
		sock := filepath.Join(root, "snapshotter.sock")
		args := strings.Fields(strings.NewReplacer("ROOT", filepath.Join(root, "state"), "SOCK", sock).Replace(cmdline))
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		stop := func() error { cmd.Process.Kill(); cmd.Wait(); return nil }
		// The socket's file appears at bind, a moment before the daemon
		// listens: wait until a connection is accepted, not for the file.
		for i := 0; ; i++ {
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				break
			}
			if i == 200 {
				stop()
				return nil, nil, fmt.Errorf("%s: no listener at %s after 10 s", args[0], sock)
			}
			time.Sleep(50 * time.Millisecond)
		}
		sn, conn, err := dial(sock)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return sn, func() error { sn.Close(); conn.Close(); return stop() }, nil
	}
}

// TestCount prints how many snapshots the daemon serving SNAPSHOTTER_SOCK
// lists (List, through containerd's proxy client): "snapshots: N".
func TestCount(t *testing.T) {
	sock := os.Getenv("SNAPSHOTTER_SOCK")
	if sock == "" {
		t.Skip("no SNAPSHOTTER_SOCK")
	}
	sn, conn, err := dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n := 0
	if err := sn.Walk(context.Background(), func(ctx context.Context, si snapshots.Info) error {
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("snapshots: %d\n", n)
}

// TestPrepare, ours: one call through containerd's proxy client to the
// daemon serving SNAPSHOTTER_SOCK, as a remote snapshotter's client makes
// it: a Prepare of PREPARE_KEY on PREPARE_PARENT labelled PREPARE_LABELS
// (KEY=VALUE,...), or with REMOVE set a Remove of PREPARE_KEY; prints
// "prepare: ok", "prepare: already exists" or "prepare: ERROR".
func TestPrepare(t *testing.T) {
	sock, key := os.Getenv("SNAPSHOTTER_SOCK"), os.Getenv("PREPARE_KEY")
	if sock == "" || key == "" {
		t.Skip("no SNAPSHOTTER_SOCK or PREPARE_KEY")
	}
	sn, conn, err := dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if os.Getenv("REMOVE") != "" {
		err = sn.Remove(context.Background(), key)
	} else {
		labels := map[string]string{}
		for _, kv := range strings.Split(os.Getenv("PREPARE_LABELS"), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				labels[k] = v
			}
		}
		_, err = sn.Prepare(context.Background(), key, os.Getenv("PREPARE_PARENT"),
			snapshots.WithLabels(labels))
	}
	switch {
	case err == nil:
		fmt.Println("prepare: ok")
	case errdefs.IsAlreadyExists(err):
		fmt.Println("prepare: already exists")
	default:
		fmt.Printf("prepare: %v\n", err)
	}
}

func TestSnapshotter(t *testing.T) {
	testutil.RequiresRoot(t)
	if cmdline := os.Getenv("SNAPSHOTTER_CMD"); cmdline != "" {
		testsuite.SnapshotterSuite(t, "proxy", proxied(cmdline))
		return
	}
	testsuite.SnapshotterSuite(t, "overlayfs", func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
		sn, err := overlay.NewSnapshotter(root)
		if err != nil {
			return nil, nil, err
		}
		return sn, sn.Close, nil
	})
}
