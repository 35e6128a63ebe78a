DROP TABLE controls;
DROP TABLE residents;
