// Command silent is a program for tests that is no plugin: it prints nothing
// and waits, as a binary that never answers the handshake would. It gives up
// after a minute so that it can never linger.
package main

import "time"

func main() {
	time.Sleep(time.Minute)
}
