DROP TABLE tree_policies;
