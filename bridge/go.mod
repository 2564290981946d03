module baton.dev/bridge

// The standard library only: no require lines, ever (docs/architecture.md, "The stdio bridge").
go 1.26
