module flockd/clients/go

go 1.19

require github.com/gomodule/redigo v1.8.3

// Debian's golang-github-gomodule-redigo-dev, so that this builds offline. Elsewhere:
// go mod edit -dropreplace github.com/gomodule/redigo && go mod tidy
replace github.com/gomodule/redigo => /usr/share/gocode/src/github.com/gomodule/redigo
