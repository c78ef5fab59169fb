package httpapi

import (
	"context"
	"net/http"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
)

// The block list (admin): PUT /v1/blocks/{user} blocks, DELETE unblocks,
// GET reads one user's flag, GET /v1/blocks lists the blocked users.

func blockJSON(user string, f crdt.Flag) api.Block {
	out := api.Block{User: user, Blocked: f.Value.Blocked}
	if f.HLC != 0 {
		at := hlcTime(f.HLC)
		out.HLC, out.Replica, out.At = f.HLC.String(), f.Origin, &at
	}
	return out
}

// PUT /v1/blocks/{user}
func (s *Server) putBlock(w http.ResponseWriter, r *http.Request) error { return s.block(w, r, true) }

// DELETE /v1/blocks/{user}
func (s *Server) deleteBlock(w http.ResponseWriter, r *http.Request) error {
	return s.block(w, r, false)
}

func (s *Server) block(w http.ResponseWriter, r *http.Request, blocked bool) error {
	user, err := pathID(r, "user")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.rep.Admin().Block(ctx, user, blocked)
	if err != nil {
		return err
	}
	out := blockJSON(user, res.Flag)
	out.Changed = res.Changed
	writeJSON(w, http.StatusOK, out)
	return nil
}

// GET /v1/blocks/{user}
func (s *Server) getBlock(w http.ResponseWriter, r *http.Request) error {
	user, err := pathID(r, "user")
	if err != nil {
		return err
	}
	f, err := s.rep.Admin().Flag(user)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, blockJSON(user, f))
	return nil
}

// GET /v1/blocks
func (s *Server) getBlocks(w http.ResponseWriter, r *http.Request) error {
	limit, after, err := listQuery(r)
	if err != nil {
		return err
	}
	flags, more, err := s.rep.Admin().Flags(after, limit, true)
	if err != nil {
		return err
	}
	out := api.Blocks{Users: make([]api.Block, len(flags))}
	for i, f := range flags {
		out.Users[i] = blockJSON(f.User, f.Flag)
	}
	if more && len(flags) > 0 {
		out.Next = flags[len(flags)-1].User
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
