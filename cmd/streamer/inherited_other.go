//go:build !linux

package main

// keepInheritedToItself has no list of open descriptors to read here: the
// workers inherit those the server inherited without close-on-exec.
func keepInheritedToItself() {}
