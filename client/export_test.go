package client

// KeyOf is keyOf, for the external tests.
var KeyOf = keyOf
