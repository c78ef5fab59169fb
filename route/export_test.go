package route

// UniqueQueryOf is uniqueQuery, for the tests of package route_test.
var UniqueQueryOf = uniqueQuery

// Waiting is how many requests for h wait for a message to come back.
func (s *Sender) Waiting(h string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[h]; q != nil {
		return len(q.waiting)
	}
	return 0
}
