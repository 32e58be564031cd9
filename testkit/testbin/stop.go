package testbin

import "syscall"

// Stop ends the server as an init system does, with SIGTERM (a graceful
// shutdown), and waits for it to exit.
func (s *Server) Stop() { s.end(syscall.SIGTERM) }

// Kill ends the server at once, with SIGKILL (as a power cut would), and
// waits for it to exit.
func (s *Server) Kill() { s.end(syscall.SIGKILL) }

func (s *Server) end(sig syscall.Signal) {
	s.Cmd.Process.Signal(sig)
	s.Cmd.Wait()
}
