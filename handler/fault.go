//go:build !unwoundfault

package handler

// fault is empty in real builds: the hooks compile to nothing.
type fault struct{}

func childFault() fault { return fault{} }

func (fault) at(string) {}
