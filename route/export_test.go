package route

// UniqueQueryOf is uniqueQuery, for the tests of package route_test.
var UniqueQueryOf = uniqueQuery
