DROP TABLE approvals;
