// Package procstat reads a process's state from Linux's /proc/PID/stat.
package procstat

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Fields returns the fields of /proc/PID/stat that follow the process's
// name (which is in parentheses, and may hold spaces and parentheses of
// its own): its state first (the file's third field), its flags seventh
// (the ninth). The error is the read's: a process reaped has no entry.
func Fields(pid int) ([]string, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return nil, nil
	}
	return strings.Fields(string(stat[end+1:])), nil
}

// Ended reports whether process pid has exited: it is a zombie, or no
// longer there.
func Ended(pid int) bool {
	fields, err := Fields(pid)
	return err != nil || len(fields) == 0 || fields[0] == "Z" || fields[0] == "X"
}
