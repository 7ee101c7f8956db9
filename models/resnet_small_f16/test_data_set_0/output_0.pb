

BoutputJ4k<9๘ณ+บkขO8ุ5๕/ูป