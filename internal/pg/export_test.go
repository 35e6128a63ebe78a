package pg

// Internals the external tests reach.
var NewMigrator = newMigrator

const ListenerName = listenerName
