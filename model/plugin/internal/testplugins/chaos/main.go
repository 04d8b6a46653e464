// Command chaos is a model plugin for tests: it echoes its items, and
// misbehaves on purpose when an item is one of its trigger strings, so that
// tests can crash, hang or upset a real plugin process.
//
// Triggers (items that are msgpack strings):
//
//	crash          exit with status 3
//	panic          panic
//	die:TEXT       write TEXT (which may hold several lines) on stderr, then
//	               exit with status 1, as a program in another language
//	               dies of an exception
//	hang           never return
//	reject         fail this item alone
//	wrong-count    answer the batch with one output too few
//	batch-error    fail the whole batch
//	long-error:N   fail the whole batch with a message of N KiB
//	empty-reject   fail this item alone with an empty error
//	long-reject:N  fail this item alone with a message of N KiB
//	say:TEXT       write TEXT on stderr, then echo
//	print:TEXT     write TEXT on stdout, then echo
//	pid            answer with the plugin's process id
//	big:N          answer with a string of N MiB
//	env:NAME       answer with the value of environment variable NAME
//	config         answer with the Init config: {"args": {...}, "device": "..."}
//	fork           start "sleep 60" and answer with its pid
//	daemon         start "sleep 60" in a session of its own, holding the
//	               plugin's stderr, say "chaos plugin: daemon pid N" on
//	               stderr, then exit with status 3
//
// Init fails when the plugin-arg fail-init is set (with its value as the
// message) and exits with status 4 when init-exit is set.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/streamer-dev/streamer/model/plugin/sdk"
)

type chaos struct {
	cfg sdk.Config
}

func (c *chaos) Init(_ context.Context, cfg sdk.Config) (sdk.Info, error) {
	if msg, ok := cfg.Args["fail-init"]; ok {
		return sdk.Info{}, errors.New(msg)
	}
	if _, ok := cfg.Args["init-exit"]; ok {
		fmt.Fprintln(os.Stderr, "chaos plugin: exiting during init as asked")
		os.Exit(4)
	}
	c.cfg = cfg
	return sdk.Info{Name: "chaos", Device: cfg.Device}, nil
}

func (c *chaos) Predict(_ context.Context, items []sdk.Item) ([]sdk.Result, error) {
	results := make([]sdk.Result, len(items))
	for i, item := range items {
		var s string
		if item.Decode(&s) != nil {
			results[i] = sdk.Result{Output: item}
			continue
		}
		switch verb, arg, _ := strings.Cut(s, ":"); verb {
		case "fork":
			child := exec.Command("sleep", "60")
			if err := child.Start(); err != nil {
				return nil, err
			}
			results[i] = sdk.OK(child.Process.Pid)
		case "daemon":
			daemon := exec.Command("sleep", "60")
			daemon.Stderr = os.Stderr
			daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := daemon.Start(); err != nil {
				return nil, err
			}
			fmt.Fprintf(os.Stderr, "chaos plugin: daemon pid %d\n", daemon.Process.Pid)
			os.Exit(3)
		case "crash":
			fmt.Fprintln(os.Stderr, "chaos plugin: crashing on a trigger item")
			os.Exit(3)
		case "panic":
			panic("chaos plugin: panic on a trigger item")
		case "die":
			fmt.Fprint(os.Stderr, arg)
			os.Exit(1)
		case "hang":
			select {}
		case "reject":
			results[i] = sdk.Failf("chaos plugin: item %q rejected", s)
		case "wrong-count":
			return results[:len(results)-1], nil
		case "long-error":
			kib, _ := strconv.Atoi(arg)
			return nil, errors.New(strings.Repeat("E", kib<<10))
		case "empty-reject":
			results[i] = sdk.Fail(errors.New(""))
		case "long-reject":
			kib, _ := strconv.Atoi(arg)
			results[i] = sdk.Fail(errors.New(strings.Repeat("R", kib<<10)))
		case "batch-error":
			return nil, errors.New("chaos plugin: batch failed as asked")
		case "say":
			fmt.Fprintln(os.Stderr, arg)
			results[i] = sdk.Result{Output: item}
		case "print":
			fmt.Println(arg)
			results[i] = sdk.Result{Output: item}
		case "pid":
			results[i] = sdk.OK(os.Getpid())
		case "big":
			mib, _ := strconv.Atoi(arg)
			results[i] = sdk.OK(strings.Repeat("b", mib<<20))
		case "env":
			results[i] = sdk.OK(os.Getenv(arg))
		case "config":
			results[i] = sdk.OK(map[string]any{"args": c.cfg.Args, "device": c.cfg.Device})
		default:
			results[i] = sdk.Result{Output: item}
		}
	}
	return results, nil
}

func main() {
	sdk.Serve(&chaos{})
}
