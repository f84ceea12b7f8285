module pivirt.hu/dataplane

go 1.26.8
