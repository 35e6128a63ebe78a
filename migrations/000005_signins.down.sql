DROP TABLE signins;
