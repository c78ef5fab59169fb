package httpapi

// What only the tests use.

import "github.com/gorilla/mux"

// Router returns the router so tests can add routes. Routes added to it
// get the same panic recovery, logging and metrics as the built-in ones;
// wrap writes in RequireWrite and admin actions in RequireAdmin.
func (s *Server) Router() *mux.Router { return s.router }
