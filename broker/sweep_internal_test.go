package broker

import (
	"fmt"
	"slices"
	"testing"
)

// sweepNode is a node named name of prefix p, enough for sweeps.
func sweepNode(name string) *Node {
	k := newKeys("p")
	return &Node{cfg: NodeConfig{Name: name}, k: k, own: k.nodeItems(name)}
}

// Each live node's own stream is looked at for items to claim by its own
// node and by sweepers others, the same whichever node asks; the shared
// stream, and the streams of nodes gone, by every node. With sweepers + 1
// live nodes or fewer, every node looks at every stream, as before there
// were sweepers.
func TestEachLiveStreamIsSweptByItsNodeAndAFewOthers(t *testing.T) {
	for _, count := range []int{1, 2, sweepers + 1, 4, 16, 100} {
		t.Run(fmt.Sprintf("%d live nodes", count), func(t *testing.T) {
			k := newKeys("p")
			var live, streams []string
			for i := range count {
				name := fmt.Sprintf("gpu-%d", i)
				live = append(live, name)
				streams = append(streams, k.nodeItems(name))
			}
			gone := k.nodeItems("gone")
			streams = append(streams, gone, "p:items:") // a gone node's, and one of no node
			sweptBy := map[string][]string{}
			for _, name := range live {
				swept := sweepNode(name).sweeps(streams, live)
				if swept[0] != k.items {
					t.Errorf("%s looks first at %s; want the shared stream, %s", name, swept[0], k.items)
				}
				for _, want := range []string{k.nodeItems(name), gone, "p:items:"} {
					if !slices.Contains(swept, want) {
						t.Errorf("%s does not look at %s", name, want)
					}
				}
				for _, key := range swept[1:] {
					sweptBy[key] = append(sweptBy[key], name)
				}
			}
			for _, name := range live {
				key := k.nodeItems(name)
				want := min(count-1, sweepers) + 1
				if got := sweptBy[key]; len(got) != want {
					t.Errorf("%s's stream is looked at by %v; want its own node and %d others", name, got, want-1)
				}
			}
			// Spread: no node looks at many more streams than its share.
			looks := map[string]int{}
			for key, by := range sweptBy {
				if key == gone || key == "p:items:" {
					continue
				}
				for _, name := range by {
					looks[name]++
				}
			}
			for name, n := range looks {
				if n > 1+3*sweepers {
					t.Errorf("%s looks at %d streams of live nodes; want its own and about %d others", name, n, sweepers)
				}
			}
		})
	}
}

// A node that missed a beat (not among the fresh: its beat failing, or it
// died) still looks at the shared stream and its own, and sweeps no other
// fresh node's; every fresh node looks at its stream.
func TestANodeThatMissedABeatIsSweptByAll(t *testing.T) {
	k := newKeys("p")
	fresh := []string{"a", "b", "c", "d", "e"}
	var streams []string
	for _, name := range append(fresh, "x") {
		streams = append(streams, k.nodeItems(name))
	}
	got := sweepNode("x").sweeps(streams, fresh)
	if want := []string{k.items, k.nodeItems("x")}; !slices.Equal(got, want) {
		t.Errorf("a node not among the fresh looks at %v; want %v", got, want)
	}
	for _, name := range fresh {
		if !slices.Contains(sweepNode(name).sweeps(streams, fresh), k.nodeItems("x")) {
			t.Errorf("%s does not look at the stream of x, which missed a beat", name)
		}
	}
}

// A stream's sweepers that missed a beat (died with its node: nodes of one
// machine) are replaced by the next fresh nodes by rank.
func TestSweepersThatMissedABeatAreReplaced(t *testing.T) {
	k := newKeys("p")
	var all []string
	for i := range 8 {
		all = append(all, fmt.Sprintf("gpu-%d", i))
	}
	owner := all[0]
	stream := k.nodeItems(owner)
	sweepersOf := func(fresh []string) []string {
		var by []string
		for _, name := range fresh {
			if sweepsFor(stream, owner, name, fresh) {
				by = append(by, name)
			}
		}
		return by
	}
	first := sweepersOf(all)
	if len(first) != sweepers {
		t.Fatalf("sweepers of %s: %v; want %d", stream, first, sweepers)
	}
	rest := slices.DeleteFunc(slices.Clone(all), func(name string) bool { return slices.Contains(first, name) })
	then := sweepersOf(rest)
	if len(then) != sweepers || slices.ContainsFunc(then, func(name string) bool { return slices.Contains(first, name) }) {
		t.Errorf("with its sweepers %v gone stale, %s is swept by %v; want %d others", first, stream, then, sweepers)
	}
}
